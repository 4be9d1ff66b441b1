"""specs/swe-lite-agents.toml on one task, every subject and fault (real runtime, ~200 s).

What the draft protocol measures: mini-swe-agent completes under every fault, each fault
witnessed, and commits the submit twice exactly where it has no defence (a lost submit response,
SIGKILL after the submit's effect); the reference control (intent_reconcile, planning each step
with its scripted model) completes under every fault, each witnessed, the model faults included,
without a duplicate; and it really asked its model (one model call per step at the least).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.subjects.agents import attempts, fault_blocks, make_spec, run_draft, subject_block

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

DUPLICATES = {"lost-submit-response", "sigkill-after-submit-effect"}


def test_the_agents_protocol_on_one_task(tmp_path: Path) -> None:
    faults = fault_blocks()
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
        if start["fault_id"] != "none":
            assert "witnessed" in states and "rejected" not in states, (key, states)
        if start["subject_id"] == "intent-reconcile":
            (counts,) = [r for r in rs if r["type"] == "tool_calls"]
            assert counts["by_tool"].get("model", 0) >= 9, (key, counts)
    faults_ids = sorted({f for _, f in seen})
    assert len(faults_ids) == 9  # baseline + 8 faults
    for f in faults_ids:
        outcome, committed = seen[("mini-swe-agent", f)]
        assert outcome == "subject_finished", (f, outcome)
        assert committed == (2 if f in DUPLICATES else 1), (f, committed)
        outcome, committed = seen[("intent-reconcile", f)]
        assert outcome == "subject_finished" and committed == 1, (f, outcome)
