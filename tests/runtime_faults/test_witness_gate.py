"""Witness before recovery, judged, on the real runtime (issue 13).

Before it recovers, the runtime runs the evaluator's own witness check on what it persisted. A
no-op SIGKILL leaves the subject alive, so the reaper sees no signal: the engine writes
`rejected`, never asks for the relaunch, and the attempt ends `injection_rejected` without a
grade; the evaluator calls it INVALID_INJECTION (retried under the attempt policy). A real one
is witnessed, then recovered: the subject is relaunched once.
"""

from __future__ import annotations

import pytest

from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.protocol.faultkinds import SIGKILL_MID_TOOL_CALL
from runner.runtime.attempt.run import journal_name
from runner.runtime.attempt.services import RunServices
from runner.runtime.selftest import INVALID_INJECTION, WITNESSED, run_case

pytestmark = pytest.mark.runtime


def _journal(services: RunServices, plan) -> list:  # type: ignore[no-untyped-def]
    path = services.run_dir / "journals" / f"{journal_name(plan)}.jsonl"
    return [e.record for e in read_journal(path)]


def _states(recs: list) -> list[str]:  # type: ignore[type-arg]
    return [r.state for r in recs if r.type == "lifecycle"]


def test_a_rejected_witness_is_never_recovered(services: RunServices, image: str) -> None:
    row, plan = run_case(services, SIGKILL_MID_TOOL_CALL, "noop", image)
    assert row.verdict == INVALID_INJECTION, row
    assert "witness_rejected" in row.reasons, row
    recs = _journal(services, plan)
    assert _states(recs) == ["scheduled", "armed", "injected", "rejected"]
    (ended,) = [r for r in recs if r.type == "attempt_ended"]
    assert ended.outcome == "injection_rejected" and ended.trigger_reached
    assert not [r for r in recs if r.type == "grader_result"]
    assert [r.restart_index for r in recs if r.type == "subject_exit"] == [0]  # no relaunch


def test_a_witnessed_kill_is_recovered_and_labelled_by_the_engine(
    services: RunServices, image: str
) -> None:
    row, plan = run_case(services, SIGKILL_MID_TOOL_CALL, "real", image)
    assert row.verdict == WITNESSED, row
    recs = _journal(services, plan)
    assert _states(recs) == ["scheduled", "armed", "injected", "witnessed", "recovered"]
    assert [r.restart_index for r in recs if r.type == "subject_exit"] == [0, 1]
    (receipt,) = [r for r in recs if r.type == "actuator_receipt"]
    assert receipt.component == "subject_launcher"
    obs = {r.name: r.observation for r in recs if r.type == "witness_observation"}
    assert obs["reaper_exit"]["collector"] == "reaper"
    assert obs["reaper_exit"]["component"] == "reaper"
    assert obs["interposer_call"]["collector"] == "tool_interposer"  # selftest: exec call


def test_a_proxied_kill_files_the_call_under_the_egress_proxy(
    services: RunServices, image: str
) -> None:
    trigger = {"tool": "submit_patch", "ordinal": 1, "phase": "received"}
    row, plan = run_case(services, SIGKILL_MID_TOOL_CALL, "real", image, trigger=trigger)
    assert row.verdict == WITNESSED, row
    obs = {
        r.name: r.observation for r in _journal(services, plan) if r.type == "witness_observation"
    }
    assert obs["interposer_call"]["collector"] == "egress_proxy"  # no longer relabelled
    assert obs["interposer_call"]["component"] == "egress_proxy"
