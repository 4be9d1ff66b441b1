"""Known-answer vectors (vectors/eligibility/): fixed evidence + fixed policy -> fixed proof bytes.

Regenerate deliberately, after a reviewed change to the evaluator's rules, with
`AFB_REGENERATE_VECTORS=1 pytest tests/evidence/test_vectors.py`; a diff in these files is a
change of protocol and needs an amendment.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.evaluator.protocol.faultkinds import LOST_RESPONSE
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


CASES = {
    "all-completed": (_case_all_completed, _case_all_completed),
    "noop-lost-response": (_case_all_completed, _case_noop_lost_response),
    "mixed-with-missing": (_case_mixed, _case_all_completed),
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
        if p.is_file()
    }
    assert sorted(expected) == sorted(files)
    for rel in sorted(files):
        assert files[rel] == expected[rel], f"{case}: {rel} differs from its known answer"
