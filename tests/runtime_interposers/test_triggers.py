"""Trigger engine: exact ordinal and phase, once, never when unreached, lifecycle order."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.journal import Journal, read_journal
from runner.evaluator.evidence.records import Record
from runner.evaluator.protocol.faultkinds import (
    LOST_RESPONSE,
    SANDBOX_RESTART,
    SIGKILL_MID_TOOL_CALL,
)
from runner.evaluator.protocol.spec import Trigger
from runner.evaluator.protocol.witness import WitnessContract, load_contracts
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.events import CallEvent, Directive
from runner.runtime.faults.base import (
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    PluginContractError,
    WitnessStage,
    check_against_contract,
    stamp_observations,
    validate_plugin,
)
from runner.runtime.faults.collectors import Collector, register_collector
from runner.runtime.faults.lost_response import LostResponseFault
from runner.runtime.faults.sigkill import SigkillFault
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from runner.runtime.interposers.tools import ToolInterposer
from tests.runtime_interposers.conftest import CELL, LocalSandbox, effect, request

WITNESSES = Path(__file__).resolve().parents[2] / "witnesses"
register_collector(Collector("probe_collector", "probe"))


class Probe(FaultPlugin):
    """A test fault: records where it was injected; its collector echoes the call id."""

    kind = SIGKILL_MID_TOOL_CALL
    actuator = "test.probe"
    actuator_component = "test"
    observations = {"seen": Observed("probe_collector", WitnessStage.AFTER_INJECTION)}

    def __init__(self, directive: Directive = Directive.CONTINUE, collector: str = "") -> None:
        self.directive = directive
        self.collector = collector  # a label of its own: the engine must refuse it
        self.injected: list[CallEvent] = []
        self.released = 0

    def inject(self, ctx: FaultContext) -> Injection:
        self.injected.append(ctx.require_event())
        return Injection(applied=True, directive=self.directive)

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        label = {"collector": self.collector} if self.collector else {}
        return {"seen": {**label, "call_id": ctx.require_event().call_id}}

    def release(self, ctx: FaultContext) -> None:
        self.released += 1


class DeferredProbe(Probe):
    witness_after_directive = True


def records(journal: Journal) -> list[Record]:
    return [e.record for e in read_journal(journal.path)]


def types(journal: Journal) -> list[str]:
    out = []
    for r in records(journal):
        out.append(f"lifecycle:{r.state}" if r.type == "lifecycle" else r.type)
    return out


def engine_with(journal: Journal, plugin: FaultPlugin, **trigger: Any) -> TriggerEngine:
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1, witness_timeout=10)
    engine.schedule("f1", plugin.kind, Trigger(**trigger), plugin)
    engine.arm()
    return engine


def submit(proxy: EgressProxy, call_id: str) -> int:
    headers = {"X-AFB-Call-Id": call_id}
    return request(proxy.address, "POST", "/effects", effect("repo"), headers)[0]


def test_fires_at_exact_ordinal_and_phase_once(
    journal: Journal, destination: DestinationService
) -> None:
    probe = Probe()
    engine = engine_with(journal, probe, tool="submit_patch", ordinal=2, phase=Phase.EFFECT_DONE)
    with EgressProxy(destination.address, sink=engine) as proxy:
        assert submit(proxy, "s1") == 201
        assert probe.injected == [] and not engine.reached  # 1st submit: no
        assert submit(proxy, "s2") == 201
        assert submit(proxy, "s3") == 201  # a later match never re-fires
    engine.finish()
    assert [(e.call_id, e.phase, e.ordinal) for e in probe.injected] == [
        ("s2", Phase.EFFECT_DONE, 2)
    ]
    reached = [r for r in records(journal) if r.type == "trigger_reached"]
    assert [(r.call_id, r.tool, r.ordinal, r.phase) for r in reached] == [
        ("s2", "submit_patch", 2, Phase.EFFECT_DONE)
    ]
    assert types(journal) == [
        "lifecycle:scheduled",
        "lifecycle:armed",
        "trigger_reached",
        "actuator_receipt",
        "lifecycle:injected",
        "witness_observation",
        "lifecycle:witnessed",
        "lifecycle:released",
        "tool_calls",
    ]
    assert probe.released == 1
    counts = records(journal)[-1]
    assert counts.type == "tool_calls" and counts.by_tool == {"submit_patch": 3}


def test_subject_that_never_reaches_the_trigger_gets_no_injection(
    journal: Journal, destination: DestinationService
) -> None:
    probe = Probe()
    engine = engine_with(journal, probe, tool="submit_patch", ordinal=3, phase=Phase.RECEIVED)
    with EgressProxy(destination.address, sink=engine) as proxy:
        assert submit(proxy, "a") == 201
        assert submit(proxy, "b") == 201
    assert engine.finish() == {"submit_patch": 2}
    assert not engine.reached and probe.injected == []
    assert types(journal) == ["lifecycle:scheduled", "lifecycle:armed", "tool_calls"]


def test_per_tool_ordinals_across_both_interposers(
    journal: Journal, destination: DestinationService, run_dir: Path
) -> None:
    (run_dir / "sb").mkdir()
    by_tool, any_tool = Probe(), Probe()
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    engine.schedule("exec2", by_tool.kind, Trigger(tool="exec", ordinal=2, phase=Phase.RECEIVED),
                    by_tool)  # fmt: skip
    engine.schedule("any3", any_tool.kind, Trigger(tool="*", ordinal=3, phase=Phase.DISPATCHED),
                    any_tool)  # fmt: skip
    engine.arm()
    with (
        ToolInterposer(LocalSandbox(run_dir / "sb"), sink=engine) as ti,
        EgressProxy(destination.address, sink=engine) as proxy,
    ):
        sid = request(ti.address, "POST", "/session", {})[1]["session_id"]

        def exec_(cid: str) -> None:
            body = {"session_id": sid, "call_id": cid, "tool": "exec", "args": {"argv": ["true"]}}
            assert request(ti.address, "POST", "/call", body)[0] == 200

        exec_("x1")
        submit(proxy, "p1")
        submit(proxy, "p2")  # 3rd call of any tool
        exec_("x2")  # 2nd exec
        exec_("x3")
    assert [(e.source, e.call_id, e.phase) for e in by_tool.injected] == [
        ("tool_interposer", "x2", Phase.RECEIVED)
    ]
    assert [(e.source, e.call_id, e.any_ordinal) for e in any_tool.injected] == [
        ("egress_proxy", "p2", 3)
    ]
    assert engine.finish() == {"exec": 3, "submit_patch": 2}


def test_fires_exactly_once_under_concurrency(journal: Journal) -> None:
    probe = Probe()
    engine = engine_with(journal, probe, tool="*", ordinal=9, phase=Phase.DISPATCHED)
    barrier = threading.Barrier(16)

    def caller(n: int) -> None:
        barrier.wait()
        for i in range(4):
            cid = f"t{n}-{i}"
            engine.event("tool_interposer", "exec", Phase.RECEIVED, cid)
            engine.event("tool_interposer", "exec", Phase.DISPATCHED, cid)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(probe.injected) == 1 and probe.injected[0].any_ordinal == 9
    assert engine.counts() == {"exec": 64}


def test_events_of_unknown_calls_and_other_phases_do_not_fire(journal: Journal) -> None:
    probe = Probe()
    engine = engine_with(journal, probe, tool="exec", ordinal=1, phase=Phase.EFFECT_DONE)
    assert (
        engine.event("s", "exec", Phase.EFFECT_DONE, "never-received").directive
        is Directive.CONTINUE
    )
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    engine.event("s", "exec", Phase.DISPATCHED, "c1")
    assert probe.injected == []
    engine.event("s", "exec", Phase.EFFECT_DONE, "c1")
    assert len(probe.injected) == 1


def test_directive_reaches_the_interposer(journal: Journal) -> None:
    probe = Probe(directive=Directive.CLOSE_WITHOUT_RESPONSE)
    engine = engine_with(journal, probe, tool="exec", ordinal=1, phase=Phase.RECEIVED)
    assert (
        engine.event("s", "exec", Phase.RECEIVED, "c1").directive
        is Directive.CLOSE_WITHOUT_RESPONSE
    )
    assert engine.event("s", "exec", Phase.RECEIVED, "c2").directive is Directive.CONTINUE


def test_recovery_waits_for_the_deferred_witness(journal: Journal) -> None:
    probe = DeferredProbe()
    engine = engine_with(journal, probe, tool="exec", ordinal=1, phase=Phase.EFFECT_DONE)
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    decision = engine.event("s", "exec", Phase.EFFECT_DONE, "c1")
    assert "lifecycle:witnessed" not in types(journal)
    nxt = threading.Thread(target=engine.event, args=("s", "exec", Phase.RECEIVED, "c2"))
    nxt.start()
    nxt.join(0.3)
    assert nxt.is_alive()  # the subject's next call is held until the witness is durable
    decision.complete()
    nxt.join(5)
    assert not nxt.is_alive()
    assert types(journal)[-3:] == [
        "witness_observation",
        "lifecycle:witnessed",
        "lifecycle:released",
    ]
    decision.complete()  # idempotent
    assert types(journal).count("lifecycle:witnessed") == 1


def test_wrong_collector_is_a_harness_error_and_never_witnessed(journal: Journal) -> None:
    probe = Probe(collector="somebody_else")
    engine = engine_with(journal, probe, tool="exec", ordinal=1, phase=Phase.RECEIVED)
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    t = types(journal)
    assert "harness_error" in t and "lifecycle:witnessed" not in t
    assert t[-1] == "lifecycle:released"  # released all the same: nothing may stay held


def test_plugin_declarations_are_checked(journal: Journal, destination: DestinationService) -> None:
    contracts = load_contracts(WITNESSES)
    with EgressProxy(destination.address) as proxy:
        lost = LostResponseFault(proxy, destination.address)
        validate_plugin(lost)
        validate_plugin(lost.noop())
        check_against_contract(lost, contracts[LOST_RESPONSE])
        check_against_contract(lost.noop(), contracts[LOST_RESPONSE])
        with pytest.raises(PluginContractError):
            check_against_contract(lost, contracts[SANDBOX_RESTART])

    class Incomplete(Probe):
        observations = {}

    with pytest.raises(PluginContractError):
        validate_plugin(Incomplete())
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    trigger = Trigger(tool="*", ordinal=1, phase=Phase.RECEIVED)
    with pytest.raises(PluginContractError):
        engine.schedule("f", SIGKILL_MID_TOOL_CALL, trigger, Incomplete())
    with pytest.raises(ValueError, match="plugin implements"):
        engine.schedule("f", LOST_RESPONSE, trigger, Probe())


# ---------------------------------------------- witness judged before recovery (issue 13)

JUDGED = WitnessContract.model_validate(
    {
        "schema": "afb.witness/1",
        "kind": SIGKILL_MID_TOOL_CALL,
        "version": "1",
        "description": "the probe saw its call",
        "observations": [
            {"name": "seen", "collector": "probe_collector", "phase": "after_injection"}
        ],
        "predicates": [{"id": "saw_it", "op": "eq", "left": "seen.ok", "right": {"const": True}}],
    }
)


class Judged(Probe):
    """Recovers (like sigkill); its collector reports `ok` as told."""

    settles_by = "recover"

    def __init__(self, ok: bool, **kw: Any) -> None:
        super().__init__(**kw)
        self.ok = ok
        self.recovered = 0

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        return {"seen": {"call_id": ctx.require_event().call_id, "ok": self.ok}}

    def recover(self, ctx: FaultContext) -> None:
        self.recovered += 1


def judged_engine(
    journal: Journal, plugin: FaultPlugin, stops: list[str], timeout: float = 10
) -> TriggerEngine:
    engine = TriggerEngine(
        journal,
        cell_id=CELL,
        attempt=1,
        witness_timeout=timeout,
        on_reject=lambda fid, why: stops.append(f"{fid}: {why}"),
    )
    trigger = Trigger(tool="exec", ordinal=1, phase=Phase.RECEIVED)
    engine.schedule("f1", plugin.kind, trigger, plugin, {}, JUDGED)
    engine.arm()
    return engine


def test_a_satisfied_witness_is_recovered_from(journal: Journal) -> None:
    probe, stops = Judged(ok=True), []
    engine = judged_engine(journal, probe, stops)
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    engine.finish()
    assert types(journal)[-4:] == [
        "witness_observation",
        "lifecycle:witnessed",
        "lifecycle:recovered",
        "tool_calls",
    ]
    assert probe.recovered == 1 and stops == [] and engine.rejected() == []
    (obs,) = [r for r in records(journal) if r.type == "witness_observation"]
    # the engine, not the plugin, names the collector and its component
    assert obs.observation["collector"] == "probe_collector"
    assert obs.observation["component"] == "probe"


def test_a_failed_witness_stops_the_attempt_without_recovery(journal: Journal) -> None:
    probe, stops = Judged(ok=False), []
    engine = judged_engine(journal, probe, stops)
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    engine.finish()
    t = types(journal)
    assert "lifecycle:witnessed" not in t and "lifecycle:recovered" not in t
    assert t[-2:] == ["lifecycle:rejected", "tool_calls"]
    assert probe.recovered == 0 and engine.rejected() == ["f1"]
    assert stops == ["f1: witness failed: saw_it"]
    (rej,) = [r for r in records(journal) if getattr(r, "state", "") == "rejected"]
    assert rej.note == "witness failed: saw_it"


def test_a_released_fault_is_still_released_after_rejection(journal: Journal) -> None:
    probe, stops = Judged(ok=False), []
    probe.settles_by = "release"  # type: ignore[misc]
    engine = judged_engine(journal, probe, stops)
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    assert types(journal)[-2:] == ["lifecycle:rejected", "lifecycle:released"]
    assert probe.released == 1 and len(stops) == 1


def test_a_deferred_witness_that_never_completes_times_out_rejected(journal: Journal) -> None:
    class Deferred(Judged):
        witness_after_directive = True

    probe, stops = Deferred(ok=True), []
    engine = judged_engine(journal, probe, stops, timeout=0.3)
    engine.event("s", "exec", Phase.RECEIVED, "c1")  # the interposer never calls complete()
    t0 = time.monotonic()
    engine.event("s", "exec", Phase.RECEIVED, "c2")  # held at most witness_timeout
    assert time.monotonic() - t0 < 2
    assert "lifecycle:rejected" in types(journal)
    assert "lifecycle:recovered" not in types(journal) and probe.recovered == 0
    assert stops == ["f1: witness timed out after 0.3 s"]


def test_a_plugin_cannot_label_its_own_observation(journal: Journal) -> None:
    probe, stops = Judged(ok=True, collector="tool_interposer"), []

    def labelled(ctx: FaultContext, stage: WitnessStage) -> Observations:
        return {"seen": {"collector": "tool_interposer", "ok": True}}

    probe.collect_witness = labelled  # type: ignore[method-assign]
    engine = judged_engine(journal, probe, stops)
    engine.event("s", "exec", Phase.RECEIVED, "c1")
    t = types(journal)
    assert "harness_error" in t and "lifecycle:rejected" in t and "lifecycle:witnessed" not in t
    (obs,) = [r for r in records(journal) if r.type == "witness_observation"]
    assert obs.observation["collector"] == "probe_collector"  # persisted under the true name


def test_sigkill_files_a_proxied_call_under_the_proxy() -> None:
    contracts = load_contracts(WITNESSES)
    plugin = SigkillFault(None, None)  # type: ignore[arg-type]
    validate_plugin(plugin)
    check_against_contract(plugin, contracts[SIGKILL_MID_TOOL_CALL])
    got = {"reaper_exit": {"pid": 1}, "interposer_call": {"call_id": "c", "source": "x"}}
    for source in ("egress_proxy", "tool_interposer"):
        stamped, problems = stamp_observations(plugin, WitnessStage.AFTER_INJECTION, got, source)
        assert problems == []
        assert stamped["interposer_call"]["collector"] == source
        assert stamped["reaper_exit"] == {"pid": 1, "collector": "reaper", "component": "reaper"}
    # the old relabelling -- the proxy's record filed as the tool interposer's -- is refused
    relabelled = {**got, "interposer_call": {"collector": "tool_interposer"}}
    _, problems = stamp_observations(
        plugin, WitnessStage.AFTER_INJECTION, relabelled, "egress_proxy"
    )
    assert problems and "engine assigns 'egress_proxy'" in problems[0]


def test_a_contract_can_require_a_collector_other_than_the_actuator() -> None:
    contracts = load_contracts(WITNESSES)

    class SelfWitnessingKill(SigkillFault):
        actuator_component = "reaper"  # the same component the reaper collector reads

    with pytest.raises(PluginContractError, match="independently of the actuator"):
        check_against_contract(
            SelfWitnessingKill(None, None),  # type: ignore[arg-type]
            contracts[SIGKILL_MID_TOOL_CALL],
        )
