"""Known-answer vectors (vectors/eligibility/): fixed evidence + fixed policy -> fixed proof bytes.

Regenerate deliberately, after a reviewed change to the evaluator's rules, with
`AFB_REGENERATE_VECTORS=1 pytest tests/evidence/test_vectors.py`; a diff in these files is a
change of protocol and needs an amendment.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.evaluator.protocol.faultkinds import (
    LOST_RESPONSE,
    NETWORK_PARTITION,
    NO_FAULT,
    SANDBOX_RESTART,
    SIGKILL_MID_TOOL_CALL,
)
from runner.evaluator.publish.results import derive
from tests.evidence.synth import Run

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "eligibility"
FIXED_EVALUATOR = "sha256:" + "0" * 64


def _case_all_completed(i: int, s) -> str:
    return "completed"


def _case_noop_lost_response(i: int, s) -> str:
    return "noop" if s.schedule.kind == LOST_RESPONSE else "completed"


def _case_mixed(i: int, s) -> str | None:
    return (
        ["completed", "failed", "duplicate", "pre_trigger", "completed"][i % 5] if i != 7 else None
    )


# An eligible subject with FAILED and SUBJECT_PRE_TRIGGER_FAILURE faulted cells (issue 13), as
# (outcome, tool calls) per (fault kind, task); the hand check of its measures is in the
# eligible-failed-pre-trigger case's README.md.
FAILED_PRE_TRIGGER = {
    (NO_FAULT, "e1"): ("completed", 8), (NO_FAULT, "e2"): ("completed", 8),
    (NO_FAULT, "h1"): ("completed", 8), (NO_FAULT, "h2"): ("completed", 8),
    (SIGKILL_MID_TOOL_CALL, "e1"): ("failed", 5),
    (SIGKILL_MID_TOOL_CALL, "e2"): ("pre_trigger", 2),
    (SIGKILL_MID_TOOL_CALL, "h1"): ("completed", 12),
    (SIGKILL_MID_TOOL_CALL, "h2"): ("duplicate", 10),
    (LOST_RESPONSE, "e1"): ("completed", 9), (LOST_RESPONSE, "e2"): ("completed", 9),
    (LOST_RESPONSE, "h1"): ("failed", 6), (LOST_RESPONSE, "h2"): ("pre_trigger", 1),
    (NETWORK_PARTITION, "e1"): ("completed", 8), (NETWORK_PARTITION, "e2"): ("completed", 8),
    (NETWORK_PARTITION, "h1"): ("completed", 8), (NETWORK_PARTITION, "h2"): ("completed", 8),
    (SANDBOX_RESTART, "e1"): ("completed", 11), (SANDBOX_RESTART, "e2"): ("completed", 11),
    (SANDBOX_RESTART, "h1"): ("completed", 11), (SANDBOX_RESTART, "h2"): ("completed", 11),
}  # fmt: skip


def _case_failed_pre_trigger(i: int, s) -> tuple[str, int]:
    return FAILED_PRE_TRIGGER[(s.schedule.kind, s.task_id)]


def _case_mismatch(i: int, s) -> str:
    # One lost-response hard cell finishes without reaching its trigger: its stratum is left
    # out of the comparison; the subject still publishes.
    hit = s.schedule.kind == LOST_RESPONSE and s.task_id == "h1"
    return "mismatch" if hit else "completed"


CASES = {
    "all-completed": (_case_all_completed, _case_all_completed),
    "noop-lost-response": (_case_all_completed, _case_noop_lost_response),
    "mixed-with-missing": (_case_mixed, _case_all_completed),
    "eligible-failed-pre-trigger": (_case_failed_pre_trigger, _case_all_completed),
    "scenario-mismatch-stratum": (_case_mismatch, _case_all_completed),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_eligibility_vector(tmp_path: Path, case: str) -> None:
    fa, fb = CASES[case]
    r = Run(tmp_path / case, evaluator=FIXED_EVALUATOR, fixed_clock=True)
    r.fill("a", fa)
    r.fill("b", fb)
    _, _, files = derive(r.run_dir, FIXED_EVALUATOR)
    expected_dir = VECTORS / case
    if os.environ.get("AFB_REGENERATE_VECTORS") == "1":
        for rel, data in files.items():
            target = expected_dir / rel.removeprefix("results/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    expected = {
        "results/" + str(p.relative_to(expected_dir)): p.read_bytes()
        for p in expected_dir.rglob("*")
        if p.is_file() and p.name != "README.md"  # a case's hand check, not a result
    }
    assert sorted(expected) == sorted(files)
    for rel in sorted(files):
        assert files[rel] == expected[rel], f"{case}: {rel} differs from its known answer"
