"""Build real run directories (journals, blobs, protocol.json) from declared per-cell outcomes.

Evaluator tests use the record models and the real journal writer; only the runtime that would
normally produce these records is left out, because these tests are about judging, not doing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.records import (
    ActuatorReceipt,
    AttemptEnded,
    AttemptStarted,
    GraderResult,
    HarnessError,
    LifecycleTransition,
    ToolCallCount,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.protocol.faultkinds import (
    FREEZE,
    LOST_RESPONSE,
    NETWORK_PARTITION,
    NO_FAULT,
    SANDBOX_RESTART,
    SIGKILL_MID_TOOL_CALL,
    FaultKind,
)
from runner.evaluator.protocol.freeze import FreezeRecord
from runner.evaluator.protocol.identities import Identities, compute
from runner.evaluator.protocol.matrix import Slot, resolve
from runner.evaluator.protocol.runfile import RunProtocol, write_protocol
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.protocol.witness import load_contracts

HERE = Path(__file__).parent
SPEC_AB = HERE / "spec_ab.toml"

# Observations that satisfy each witness contract (what a real collector would have written).
GOOD: dict[FaultKind, dict[str, dict[str, Any]]] = {
    SANDBOX_RESTART: {
        "sandbox_before": {"collector": "sandbox_inspector", "container_id": "c1",
                           "init_pid": 100, "started_at": "1", "boot_token": "tok-a"},
        "sandbox_after": {"collector": "sandbox_inspector", "container_id": "c1",
                          "init_pid": 200, "started_at": "2", "boot_token": "tok-b"},
        "interposer_session": {"collector": "tool_interposer", "stale_session_failed": True,
                               "reattached": True, "old_epoch": 1, "new_epoch": 2},
    },
    SIGKILL_MID_TOOL_CALL: {
        "target_process": {"collector": "process_registry", "pid": 4242,
                           "start_time": "777", "call_id": "call-3"},
        "reaper_exit": {"collector": "reaper", "pid": 4242, "start_time": "777",
                        "signaled": True, "term_signal": 9},
        "interposer_call": {"collector": "tool_interposer", "call_id": "call-3",
                            "in_flight": True},
    },
    NETWORK_PARTITION: {
        "rule_state": {"collector": "nft_reader", "rule_present": True,
                       "counter_packets_before": 0, "counter_packets_after": 3},
        "probe_during": {"collector": "netns_prober", "target_reachable": False,
                         "control_reachable": True},
        "probe_after_release": {"collector": "netns_prober", "target_reachable": True},
    },
    LOST_RESPONSE: {
        "proxy_connection": {"collector": "egress_proxy", "connection_id": "k1",
                             "upstream_request_bytes": 120, "upstream_response_bytes": 88,
                             "downstream_response_bytes": 0},
        "destination_ledger": {"collector": "destination_ledger", "committed": True,
                               "effect_id": "eff-1"},
        "agent_side": {"collector": "egress_proxy", "transport_failure": True},
    },
    FREEZE: {
        "target_process": {"collector": "process_registry", "pid": 4242, "start_time": "777",
                           "pgid": 4242, "state": "S", "call_id": "call-3"},
        "frozen": {"collector": "process_registry", "pid": 4242, "start_time": "777",
                   "pgid": 4242, "state": "T", "all_stopped": True, "threads": 2},
        "interposer_call": {"collector": "tool_interposer", "call_id": "call-3",
                            "in_flight": True},
        "resumed": {"collector": "process_registry", "pid": 4242, "start_time": "777",
                    "stopped_before_release": True, "held_ms": 500.2, "all_resumed": True},
    },
}  # fmt: skip

# What a no-op actuator's target really shows: nothing changed, though "applied" was reported.
NOOP: dict[FaultKind, dict[str, dict[str, Any]]] = {
    SANDBOX_RESTART: {
        **GOOD[SANDBOX_RESTART],
        "sandbox_after": dict(GOOD[SANDBOX_RESTART]["sandbox_before"]),
        "interposer_session": {"collector": "tool_interposer", "stale_session_failed": False,
                               "reattached": False, "old_epoch": 1, "new_epoch": 1},
    },
    SIGKILL_MID_TOOL_CALL: {
        **GOOD[SIGKILL_MID_TOOL_CALL],
        "reaper_exit": {"collector": "reaper", "pid": 4242, "start_time": "777",
                        "signaled": False, "term_signal": None},
    },
    NETWORK_PARTITION: {
        "rule_state": {"collector": "nft_reader", "rule_present": False,
                       "counter_packets_before": 0, "counter_packets_after": 0},
        "probe_during": {"collector": "netns_prober", "target_reachable": True,
                         "control_reachable": True},
        "probe_after_release": {"collector": "netns_prober", "target_reachable": True},
    },
    LOST_RESPONSE: {
        **GOOD[LOST_RESPONSE],
        "proxy_connection": {**GOOD[LOST_RESPONSE]["proxy_connection"],
                             "downstream_response_bytes": 88},
        "agent_side": {"collector": "egress_proxy", "transport_failure": False},
    },
    FREEZE: {
        **GOOD[FREEZE],
        "frozen": {**GOOD[FREEZE]["frozen"], "state": "S", "all_stopped": False},
        "resumed": {"collector": "process_registry", "pid": 4242, "start_time": "",
                    "stopped_before_release": False, "held_ms": 0.0, "all_resumed": False},
    },
}  # fmt: skip

# The runtime's collector registry (runner/runtime/faults/collectors.py) and each kind's
# actuator component: the engine stamps `component` on every observation and receipt.
COMPONENT = {
    "egress_proxy": "egress_proxy", "tool_interposer": "tool_interposer",
    "destination_ledger": "destination", "reaper": "reaper",
    "process_registry": "subject_registry", "sandbox_inspector": "container_runtime",
    "nft_reader": "nftables", "netns_prober": "netns_prober",
}  # fmt: skip
ACTUATOR_COMPONENT = {
    LOST_RESPONSE: "egress_proxy", SIGKILL_MID_TOOL_CALL: "subject_launcher",
    SANDBOX_RESTART: "container_runtime", NETWORK_PARTITION: "nftables",
    FREEZE: "subject_launcher",
}  # fmt: skip
for _table in (GOOD, NOOP):
    for _kind, _obs in _table.items():
        _table[_kind] = {n: {**o, "component": COMPONENT[o["collector"]]} for n, o in _obs.items()}

# Outcome names understood by `write_attempt`. A faulted attempt journals the full lifecycle as
# the trigger engine does: scheduled, armed (before the subject), then, if the trigger is
# reached, injected and witnessed and recovered; `noop` and `no_witness` are rejected by the
# runtime's own witness check (`rejected`, nothing recovered, no grade: the attempt stopped).
OUTCOMES = (
    "completed", "failed", "duplicate", "pre_trigger", "mismatch",
    "noop", "no_witness", "harness", "wrong_scorer",
)  # fmt: skip


# name -> contract phase, per kind: where a runtime journals each observation
PHASES: dict[str, dict[str, str]] = {
    kind: {o.name: o.phase for o in c.observations}
    for kind, c in load_contracts(Path(__file__).resolve().parents[2] / "witnesses").items()
}


def frozen_record(ids: Identities) -> FreezeRecord:
    return FreezeRecord(
        type="freeze",
        protocol_id=ids.protocol_id,
        protocol_version=ids.protocol_version,
        protocol_hash=ids.protocol_hash,
        parent_protocol_hash=None,
        reason="test",
        identities=ids,
        recorded_at="2026-01-01T00:00:00Z",
        previous_record=None,
    ).sealed()  # as freeze.record writes it: the run checks the seal


class Run:
    def __init__(
        self,
        run_dir: Path,
        spec_path: Path = SPEC_AB,
        frozen: bool = True,
        spec_text: str | None = None,
        slots_filter: Callable[[list[Slot]], list[Slot]] | None = None,
        evaluator: str | None = None,
        fixed_clock: bool = False,
        in_memory: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.spec: Spec = load_spec(spec_path)
        self.matrix = resolve(self.spec)
        self.ids = compute(self.spec, spec_path, self.matrix, evaluator=evaluator)
        self._tick = 1_700_000_000_000_000_000
        self.clock = self._fixed if fixed_clock else None
        slots = self.matrix.slots if slots_filter is None else slots_filter(self.matrix.slots)
        self.slots = slots
        self.protocol = RunProtocol(
            run_id="test",
            spec_name=spec_path.name,
            spec_text=spec_text or spec_path.read_text(),
            identities=self.ids,
            slots=slots,
            contracts=list(load_contracts(project_root() / "witnesses").values()),
            freeze_record=frozen_record(self.ids) if frozen else None,
        )
        self.memory: list[tuple[str, int, Any]] | None = [] if in_memory else None
        if not in_memory:
            write_protocol(run_dir, self.protocol)
            self.store = EvidenceStore(run_dir)

    def _fixed(self) -> int:
        self._tick += 1000
        return self._tick

    def cells(self, subject: str) -> list[tuple[str, Slot]]:
        from runner.evaluator.protocol.matrix import cell_id

        h = self.ids.subject_config_hashes[subject]
        return [(cell_id(s.slot_id, h), s) for s in self.slots]

    def write_attempt(
        self, subject: str, cell: str, slot: Slot, attempt: int, outcome: str,
        calls: int = 8, wall_ns: int = 1_000_000,
    ) -> None:  # fmt: skip
        kind = slot.schedule.kind
        name = f"{cell[7:23]}-a{attempt}"
        j: Any
        if self.memory is not None:
            j = _MemJournal(name, self.memory)
        else:
            j = self.store.journal(name, self.clock) if self.clock else self.store.journal(name)
        ref = {"cell_id": cell, "attempt": attempt}
        j.append(AttemptStarted(**ref, slot_id=slot.slot_id, subject_id=subject,
                                subject_config_hash=self.ids.subject_config_hashes[subject],
                                fault_id=slot.schedule.fault_id, kind=kind))  # fmt: skip
        if outcome == "harness":
            j.append(HarnessError(**ref, stage="sandbox_create", message="container did not start"))
            j.append(AttemptEnded(**ref, outcome="harness_error", trigger_reached=False,
                                  wall_ns=str(wall_ns)))  # fmt: skip
            j.close()
            return
        reached = kind != NO_FAULT and outcome not in ("pre_trigger", "mismatch")
        rejected = reached and outcome in ("noop", "no_witness")
        fid = slot.schedule.fault_id
        if kind != NO_FAULT:
            for state in ("scheduled", "armed"):
                j.append(LifecycleTransition(**ref, fault_id=fid, state=state))
        if reached:
            trig = slot.schedule.trigger or {}
            j.append(TriggerReached(**ref, fault_id=fid, call_id="call-3", tool=trig["tool"],
                                    ordinal=trig["ordinal"], phase=trig["phase"]))  # fmt: skip
            table = {} if outcome == "no_witness" else (NOOP if outcome == "noop" else GOOD)[kind]

            def observe(phase: str) -> None:  # each observation where the runtime writes it
                for name, obs in table.items():
                    if PHASES[kind][name] == phase:
                        j.append(WitnessObservation(**ref, fault_id=fid, kind=kind, name=name,
                                                    observation=obs))  # fmt: skip

            observe("before_injection")
            j.append(ActuatorReceipt(**ref, fault_id=fid, kind=kind, actuator="test",
                                     component=ACTUATOR_COMPONENT[kind],
                                     applied=True))  # fmt: skip
            j.append(LifecycleTransition(**ref, fault_id=fid, state="injected"))
            observe("after_injection")
            if rejected:
                j.append(LifecycleTransition(**ref, fault_id=fid, state="rejected"))
                observe("after_release")  # collected for a rejected fault too (finish())
                j.append(ToolCallCount(**ref, calls=calls, by_tool={"write_file": calls}))
                j.append(AttemptEnded(**ref, outcome="injection_rejected", trigger_reached=True,
                                      wall_ns=str(wall_ns)))  # fmt: skip
                j.close()
                return
            j.append(LifecycleTransition(**ref, fault_id=fid, state="witnessed"))
            j.append(LifecycleTransition(**ref, fault_id=fid, state="recovered"))
            observe("after_release")
        done = outcome in ("completed", "duplicate", "mismatch", "noop", "no_witness",
                           "wrong_scorer")  # fmt: skip
        j.append(ToolCallCount(**ref, calls=calls, by_tool={"write_file": calls}))
        j.append(GraderResult(
            **ref, grader_id="test-grader", grader_version="1",
            scorer_version="2" if outcome == "wrong_scorer" else "1",
            completed=done, intended_effects=1,
            committed_effects=2 if outcome == "duplicate" else (1 if done else 0),
            shape_ok=True,
        ))  # fmt: skip
        j.append(AttemptEnded(**ref, outcome="subject_finished", trigger_reached=reached,
                              wall_ns=str(wall_ns)))  # fmt: skip
        j.close()

    def fill(
        self, subject: str, outcome_for: Callable[[int, Slot], str | tuple[str, int] | None]
    ) -> None:
        """Write one attempt per cell; `outcome_for(i, slot)` None leaves the cell missing.

        An (outcome, calls) pair also sets the tool-call count, and the wall time with it
        (calls x 125 us, so a cell's wall-time ratio to its baseline of 8 calls is calls / 8).
        """
        for i, (cell, slot) in enumerate(self.cells(subject)):
            o = outcome_for(i, slot)
            if isinstance(o, tuple):
                self.write_attempt(subject, cell, slot, 1, o[0], o[1], o[1] * 125_000)
            elif o is not None:
                self.write_attempt(subject, cell, slot, 1, o)


class _MemJournal:
    """Same records, same positions, no disk: for property tests that evaluate many runs."""

    def __init__(self, name: str, sink: list[tuple[str, int, Any]]) -> None:
        self.name, self.sink, self.seq = name, sink, 0

    def append(self, record: Any) -> None:
        self.seq += 1
        self.sink.append((self.name, self.seq, record))

    def close(self) -> None:
        pass


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def evaluated_run(
    run_dir: Path,
    b: str | Callable[[int, Slot], str] = "completed",
    evaluator: str | None = None,
    **run_kw: Any,
) -> Path:
    """A run whose subject a completes every cell and b has outcome `b` (one for every cell, or
    per cell), evaluated under `evaluator` (default: this one) and its results written."""
    from runner.evaluator.publish.results import derive, write_results

    r = Run(run_dir, evaluator=evaluator, **run_kw)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", b if callable(b) else lambda i, s: b)
    _, _, files = derive(r.run_dir, evaluator or evaluator_digest())
    write_results(r.run_dir, files)
    from runner.signing.sign import sign_if_keyed

    sign_if_keyed(r.run_dir, lambda _: None)  # as `bench evaluate` does (the session's test key)
    return r.run_dir


def evaluated_bundle(root: Path, evaluator: str | None = None) -> Path:
    """The reproduction and attestation tests' bundle: b duplicates every third cell."""
    return evaluated_run(
        root / "bundle", lambda i, s: "duplicate" if i % 3 == 0 else "completed", evaluator
    )
