"""The benchmark's own validity, on a real run of the smoke spec (real containers, namespaces,
signals, TCP): each reference strategy shows exactly its known weakness, every baseline
completes, and running the matrix twice gives the same terminal records byte for byte.

If a result contradicts the known answer, the benchmark is wrong, not the subject.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.reproduce import projection
from runner.evaluator.publish.results import derive
from runner.evaluator.verdict.outcomes import TerminalRecord

pytestmark = [pytest.mark.runtime, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"

# The known answer: which fault makes which strategy commit the submit twice.
DUPLICATES_UNDER = {
    "blind-retry": {"lost_response", "sigkill_mid_tool_call"},
    "checkpoint": {"lost_response", "sigkill_mid_tool_call"},
    "idempotency-key": set(),
    "intent-reconcile": set(),
}


def _run(out: Path) -> dict[str, list[TerminalRecord]]:
    # --draft: the smoke spec is not frozen; a draft yields evidence (and terminal records)
    # but never a scorecard, which is all this test needs.
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli.main", "run", str(SMOKE), "--draft",
         "--out", str(out), "--jobs", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    _, results, _ = derive(run_dir, evaluator_digest())
    for r in results.values():
        assert r.evaluation.proof.reason_codes == ["protocol_draft"], r.evaluation.proof
    return {s: r.evaluation.terminal_records for s, r in results.items()}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory):
    return _run(tmp_path_factory.mktemp("run1")), _run(tmp_path_factory.mktemp("run2"))


def test_each_strategy_shows_exactly_its_known_weakness(two_runs) -> None:
    records, _ = two_runs
    assert set(records) == set(DUPLICATES_UNDER)
    for subject, cells in records.items():
        for t in cells:
            assert t.status is not None and t.status.value == "COMPLETED", (subject, t)
            dup = (t.committed_effects or 0) - (t.intended_effects or 0)
            expected = 1 if t.kind in DUPLICATES_UNDER[subject] else 0
            assert dup == expected, f"{subject} under {t.kind}: {dup} duplicate(s)"


def test_restart_costs_the_stateless_strategy_a_full_redo(two_runs) -> None:
    records, _ = two_runs

    def extra(subject: str) -> int:
        by_kind = {t.kind: t.tool_calls or 0 for t in records[subject]}
        return by_kind["sigkill_mid_tool_call"] - by_kind["none"]

    # blind retry keeps no state, so after SIGKILL it does every step again; checkpointing
    # resumes at the step that was cut off.
    assert extra("blind-retry") >= 6
    assert 0 <= extra("checkpoint") <= 2


def test_two_runs_give_the_same_terminal_records(two_runs) -> None:
    first, second = two_runs
    for subject in first:
        assert projection(first[subject]) == projection(second[subject]), subject
