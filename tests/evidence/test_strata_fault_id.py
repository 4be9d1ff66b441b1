"""`[eligibility] strata = ["fault_id", ...]`: one stratum per declared fault, so two faults of
one kind (a lost model response, a lost submit response) are two columns, in eligibility, the
scorecard, the comparison and the report; the default strata and every existing spec's hashes
are unchanged; an unknown stratum key is exit 2 naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.results import derive, write_results
from runner.report import load_run, render_html
from tests.evidence.synth import SPEC_AB, Run

SECOND_LOSS = """
[[faults]]
id = "lose-again"
kind = "lost_response"
trigger = { tool = "submit_patch", ordinal = 2, phase = "effect_done" }
"""


def _spec(tmp: Path, strata: str | None) -> Path:
    text = SPEC_AB.read_text()
    text = text.replace("[matrix]", SECOND_LOSS + "\n[matrix]", 1)
    if strata is not None:
        assert "[eligibility]" not in text
        text += f"\n[eligibility]\nstrata = {strata}\n"
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / SPEC_AB.name
    path.write_text(text)
    return path


def _strata(tmp: Path, strata: str | None) -> tuple[set[str], Path]:
    spec = _spec(tmp, strata)
    r = Run(tmp / "run", spec_path=spec)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "duplicate" if s.schedule.fault_id == "lose-again" else "completed")
    _, results, files = derive(r.run_dir, evaluator_digest())
    write_results(r.run_dir, files)
    card = results["b"].scorecard
    assert card is not None, results["b"].evaluation.proof.reason_codes
    return set(card.strata), r.run_dir


def test_strata_by_fault_id_keep_two_faults_of_one_kind_apart(tmp_path: Path) -> None:
    by_id, run_dir = _strata(tmp_path / "id", '["fault_id", "task_bucket"]')
    assert "fault_id=lose,task_bucket=easy" in by_id
    assert "fault_id=lose-again,task_bucket=easy" in by_id
    assert "fault_id=none,task_bucket=easy" in by_id
    assert not any("fault_kind" in s for s in by_id)
    by_kind, _ = _strata(tmp_path / "kind", None)
    assert "fault_kind=lost_response,task_bucket=easy" in by_kind
    assert len(by_id) == len(by_kind) + 2  # lose / lose-again apart, in both buckets
    # the report's heatmap columns follow: one per fault id
    html = render_html(load_run(run_dir))
    assert "<th>lose-again</th>" in html and "<th>lose</th>" in html


def test_default_strata_and_hashes_unchanged(tmp_path: Path) -> None:
    spec = load_spec(SPEC_AB)
    assert spec.eligibility.strata == ["fault_kind", "task_bucket"]
    slots = resolve(spec).slots
    assert all(s.stratum.startswith("fault_kind=") for s in slots)
    explicit = _spec(tmp_path, '["fault_kind", "task_bucket"]')
    assert [s.stratum for s in resolve(load_spec(explicit)).slots][:5] == [
        s.stratum for s in resolve(load_spec(_spec(tmp_path / "d", None))).slots
    ][:5]


def test_unknown_stratum_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        load_spec(_spec(tmp_path / "x", '["fault_name"]'))
    assert "fault_name" in str(e.value) and "strata" in str(e.value)
