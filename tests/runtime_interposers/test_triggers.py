"""Trigger engine: exact ordinal and phase, once, never when unreached, lifecycle order."""

from __future__ import annotations

import threading
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
from runner.evaluator.protocol.witness import load_contracts
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.faults.base import (
    CallEvent,
    Directive,
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    PluginContractError,
    WitnessStage,
    check_against_contract,
    validate_plugin,
)
from runner.runtime.faults.lost_response import LostResponseFault
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.proxy import EgressProxy
from runner.runtime.interposers.tools import ToolInterposer
from tests.runtime_interposers.conftest import CELL, LocalSandbox, effect, request

WITNESSES = Path(__file__).resolve().parents[2] / "witnesses"


class Probe(FaultPlugin):
    """A test fault: records where it was injected; its collector echoes the call id."""

    kind = SIGKILL_MID_TOOL_CALL
    actuator = "test.probe"
    observations = {"seen": Observed("probe_collector", WitnessStage.AFTER_INJECTION)}

    def __init__(self, directive: Directive = Directive.CONTINUE, collector: str = "") -> None:
        self.directive = directive
        self.collector = collector or "probe_collector"
        self.injected: list[CallEvent] = []
        self.released = 0

    def inject(self, ctx: FaultContext) -> Injection:
        self.injected.append(ctx.require_event())
        return Injection(applied=True, directive=self.directive)

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        return {"seen": {"collector": self.collector, "call_id": ctx.require_event().call_id}}

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
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1, recovery_gate_timeout=10)
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
