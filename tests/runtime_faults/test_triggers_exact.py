"""Triggers fire at exactly their ordinal and phase; a subject that never gets there sees none."""

from __future__ import annotations

import pytest

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.evidence.records import (
    ActuatorReceipt,
    AttemptEnded,
    LifecycleTransition,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.protocol.faultkinds import LOST_RESPONSE, SANDBOX_RESTART
from runner.runtime.attempt.run import journal_name
from runner.runtime.attempt.services import RunServices
from runner.runtime.selftest import run_case

pytestmark = pytest.mark.runtime


def _records(services: RunServices, plan: object) -> list[object]:
    path = services.run_dir / "journals" / f"{journal_name(plan)}.jsonl"  # type: ignore[arg-type]
    return [e.record for e in read_journal(path)]


@pytest.mark.parametrize(
    ("tool", "ordinal", "phase", "call_id"),
    [
        ("exec", 2, "dispatched", "s4-r0-t0"),  # the minimal subject's step 4 is exec #2
        ("exec", 3, "effect_done", "s6-r0-t0"),
        ("read_file", 1, "received", "s2-r0-t0"),
        ("submit_patch", 1, "effect_done", "s5-r0-t0"),
    ],
)
def test_fires_at_exact_ordinal_and_phase(
    services: RunServices, image: str, tool: str, ordinal: int, phase: str, call_id: str
) -> None:
    trigger = {"tool": tool, "ordinal": ordinal, "phase": phase}
    kind = LOST_RESPONSE if tool == "submit_patch" else SANDBOX_RESTART
    row, plan = run_case(services, kind, "real", image, trigger=trigger)
    fired = [r for r in _records(services, plan) if isinstance(r, TriggerReached)]
    assert len(fired) == 1
    assert (fired[0].tool, fired[0].ordinal, fired[0].phase.value) == (tool, ordinal, phase)
    assert fired[0].call_id == call_id
    assert row.verdict == "WITNESSED", row


def test_unreached_trigger_injects_nothing(services: RunServices, image: str) -> None:
    trigger = {"tool": "exec", "ordinal": 9, "phase": "dispatched"}  # the subject makes 3
    row, plan = run_case(services, SANDBOX_RESTART, "real", image, trigger=trigger)
    recs = _records(services, plan)
    assert not [r for r in recs if isinstance(r, TriggerReached | ActuatorReceipt)]
    assert not [r for r in recs if isinstance(r, WitnessObservation)]
    states = [r.state for r in recs if isinstance(r, LifecycleTransition)]
    assert states == ["scheduled", "armed"]
    (ended,) = [r for r in recs if isinstance(r, AttemptEnded)]
    assert ended.outcome == "trigger_not_reached" and not ended.trigger_reached
    assert row.status == Status.SCENARIO_MISMATCH.value  # finished while avoiding the trigger
