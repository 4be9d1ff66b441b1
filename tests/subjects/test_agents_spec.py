"""specs/swe-lite-agents.toml on one task, every subject and fault (real runtime, ~200 s).

What the draft protocol measures: mini-swe-agent completes under every fault, each fault
witnessed, and commits the submit twice exactly where it has no defence (a lost submit response,
SIGKILL after the submit's effect); the reference control (intent_reconcile) completes under
every tool fault without a duplicate and, making no model calls, never reaches a model fault
(SCENARIO_MISMATCH, a valid outcome that blocks only that stratum's comparison).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.subjects.agents import AGENTS, attempts, make_spec, run_draft, subject_block

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

DUPLICATES = {"lost-submit-response", "sigkill-after-submit-effect"}


def test_the_agents_protocol_on_one_task(tmp_path: Path) -> None:
    text = AGENTS.read_text()
    faults = text[text.index("[[faults]]") : text.index("[matrix]")]
    subjects = subject_block("mini-swe-agent") + "\n" + subject_block("intent-reconcile")
    proc, run_dir = run_draft(make_spec(tmp_path, subjects, faults), tmp_path / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen: dict[tuple[str, str], tuple[str, int]] = {}
    for rs in attempts(run_dir):
        (start,) = [r for r in rs if r["type"] == "attempt_started"]
        (end,) = [r for r in rs if r["type"] == "attempt_ended"]
        grades = [r for r in rs if r["type"] == "grader_result"]
        committed = grades[0]["committed_effects"] if grades else -1
        states = {r["state"] for r in rs if r["type"] == "lifecycle"}
        key = (start["subject_id"], start["fault_id"])
        assert key not in seen  # one attempt per cell: nothing was retried
        seen[key] = (end["outcome"], committed)
        model_fault = "model" in start["fault_id"]
        if start["fault_id"] != "none" and not (
            model_fault and start["subject_id"] == "intent-reconcile"
        ):
            assert "witnessed" in states and "rejected" not in states, (key, states)
    faults_ids = sorted({f for _, f in seen})
    assert len(faults_ids) == 8  # baseline + 7 faults
    for f in faults_ids:
        outcome, committed = seen[("mini-swe-agent", f)]
        assert outcome == "subject_finished", (f, outcome)
        assert committed == (2 if f in DUPLICATES else 1), (f, committed)
        outcome, committed = seen[("intent-reconcile", f)]
        if "model" in f:
            assert outcome == "trigger_not_reached" and committed == 1, (f, outcome)
        else:
            assert outcome == "subject_finished" and committed == 1, (f, outcome)
