"""Issue 3's known-answer and adversarial cases: each rule the RFC thread argued out, as a test."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.records import AttemptEnded
from runner.evaluator.protocol.faultkinds import FREEZE, LOST_RESPONSE, NO_FAULT, injected_kinds
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.build import build_scorecard
from runner.evaluator.publish.models import (
    CellHistory,
    CellScore,
    IncompleteEvidenceReport,
    PublishableScorecard,
)
from runner.evaluator.publish.results import derive, verify, write_results
from runner.evaluator.schemas import MODELS
from tests.evidence.synth import OUTCOMES, SPEC_AB, Run

EVAL = evaluator_digest()
runner = CliRunner()


def _run(tmp_path: Path, a="completed", b="completed", **kw) -> Run:
    r = Run(tmp_path / "run", **kw)
    r.fill("a", (lambda i, s: a) if isinstance(a, str) else a)
    r.fill("b", (lambda i, s: b) if isinstance(b, str) else b)
    return r


def _run_variant(tmp_path: Path, name: str, text: str) -> Run:
    """Both subjects completed everywhere, under a variant of the A/B spec written as `name`."""
    spec = tmp_path / name
    spec.write_text(text)
    return _run(tmp_path, spec_path=spec)


def _decide(r: Run):
    _, res, files = derive(r.run_dir, EVAL)
    return res, files


def _noop_on_faulted(n: int):
    """Outcome function: a no-op injector on the last `n` faulted cells, clean elsewhere."""

    def pick(i: int, s) -> str:
        faulted = [j for j, k in enumerate(KINDS) if k is not NO_FAULT]
        return "noop" if i in faulted[-n:] else "completed"

    return pick


# Slot order is the resolved matrix's (cells of every subject follow it).
KINDS = [s.schedule.kind for s in resolve(load_spec(SPEC_AB)).slots]


def test_a_20_of_20_publishes_b_12_of_20_does_not_and_no_comparison(tmp_path: Path) -> None:
    r = _run(tmp_path, b=_noop_on_faulted(8))
    res, files = _decide(r)
    assert res["a"].scorecard is not None and res["b"].scorecard is None
    assert res["b"].report is not None
    assert res["b"].report.witnessed_cells == 12 and res["b"].report.registered_cells == 20
    assert "results/b/scorecard.json" not in files
    write_results(r.run_dir, files)
    out = tmp_path / "cmp"
    reg = tmp_path / "reg.jsonl"
    assert runner.invoke(app, ["registry", "init", "--registry", str(reg)]).exit_code == 0
    result = runner.invoke(
        app,
        ["compare", str(r.run_dir / "results/a/scorecard.json"),
         str(r.run_dir / "results/b/incomplete-evidence.json"), "--out", str(out),
         "--registry", str(reg)],
    )  # fmt: skip
    assert result.exit_code == 4
    assert not out.exists()


def test_evaluate_cli_exit_codes_and_files(tmp_path: Path) -> None:
    r = _run(tmp_path, b=lambda i, s: "completed" if i < 12 else "noop")
    result = runner.invoke(app, ["evaluate", str(r.run_dir)])
    assert result.exit_code == 3, result.output
    assert (r.run_dir / "results/a/scorecard.json").exists()
    assert (r.run_dir / "results/a/scorecard.md").exists()
    assert not list((r.run_dir / "results/b").glob("scorecard.*"))
    assert (r.run_dir / "results/b/incomplete-evidence.json").exists()
    assert (r.run_dir / "results/b/incomplete-evidence.md").exists()
    r2 = _run(tmp_path / "2")
    assert runner.invoke(app, ["evaluate", str(r2.run_dir)]).exit_code == 0


def test_incomplete_config_with_highest_success_count_leaks_no_number(tmp_path: Path) -> None:
    # A: all 20 witnessed, 10 completed. B: 14 witnessed (12 completed + 2 failed), 6 no-op.
    # B has the highest raw success count (12 > 10); nothing derived from it may be written.
    def b(i: int, s) -> str:
        return "completed" if i < 12 else ("failed" if i < 14 else "noop")

    r = _run(tmp_path, a=lambda i, s: "completed" if i % 2 else "failed", b=b)
    assert runner.invoke(app, ["evaluate", str(r.run_dir)]).exit_code == 3
    written = sorted((r.run_dir / "results/b").rglob("*"))
    assert written, "the incomplete report must still be written"
    forbidden_numbers = {"12", "0.6", "0.857142", "60", "85.7", "12/14", "12/20", "0.857143"}
    for f in written:
        text = re.sub(r"sha256:[0-9a-f]{64}|[0-9a-f]{16}-a\d+", "#", f.read_text())
        hexless = set(re.findall(r"\d+(?:[./]\d+)?", text))
        assert not hexless & forbidden_numbers, (f, hexless & forbidden_numbers)
        assert "COMPLETED" not in text and '"completed"' not in text
        for word in ("score", "rate", "rank", "percentile", "bound", "success"):
            assert word not in text.lower().replace("scorecard", ""), (f, word)


def _keys(schema: object) -> set[str]:
    out: set[str] = set()
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "properties" and isinstance(v, dict):
                out |= set(v)
            out |= _keys(v)
    elif isinstance(schema, list):
        for v in schema:
            out |= _keys(v)
    return out


def test_incomplete_report_schema_has_no_score_like_field() -> None:
    from runner.evaluator.publish.models import IncompleteEvidenceReport

    keys = _keys(IncompleteEvidenceReport.model_json_schema())
    assert keys, "schema must have properties"
    for k in keys:
        for word in ("score", "rate", "rank", "percentile", "bound", "success", "completed"):
            assert word not in k.lower(), k


def test_scorecard_cannot_be_built_from_an_ineligible_or_forged_proof(tmp_path: Path) -> None:
    r = _run(tmp_path, b=_noop_on_faulted(8))
    res, _ = _decide(r)
    good = res["a"].scorecard
    assert good is not None
    doc = good.model_dump(mode="json", by_alias=True)
    PublishableScorecard.model_validate(doc)  # the genuine one round-trips
    bad_proof = res["b"].evaluation.proof
    with pytest.raises(ValueError, match="eligible proof"):
        build_scorecard(res["b"].evaluation, r.slots)
    with pytest.raises(ValueError):
        bad = bad_proof.model_dump(mode="json", by_alias=True)
        PublishableScorecard.model_validate({**doc, "proof": bad, "proof_hash": bad["proof_hash"]})
    flipped = {**bad_proof.model_dump(mode="json", by_alias=True), "decision": "eligible",
               "reason_codes": []}  # fmt: skip
    with pytest.raises(ValueError, match="hash"):
        PublishableScorecard.model_validate(
            {**doc, "proof": flipped, "proof_hash": flipped["proof_hash"]}
        )
    forged = {**doc["proof"], "evidence_root_hash": "sha256:" + "2" * 64}
    with pytest.raises(ValueError, match="hash"):
        PublishableScorecard.model_validate({**doc, "proof": forged})
    with pytest.raises(ValueError, match="differs"):
        PublishableScorecard.model_validate({**doc, "protocol_hash": "sha256:" + "1" * 64})
    with pytest.raises(ValueError, match="every registered cell"):
        short = {**doc["cell_scores"], "lines": doc["cell_scores"]["lines"] - 1}
        PublishableScorecard.model_validate({**doc, "cell_scores": short})
    with pytest.raises(TypeError):
        PublishableScorecard.model_construct(**doc)


def test_same_evidence_same_policy_same_proof_bytes(tmp_path: Path) -> None:
    r = _run(tmp_path)
    _, f1 = _decide(r)
    _, f2 = _decide(r)
    assert f1 == f2
    copy = tmp_path / "copy"
    shutil.copytree(r.run_dir, copy)
    _, _, f3 = derive(copy, EVAL)
    assert f1 == f3


def test_changed_evaluator_blocks_publication(tmp_path: Path) -> None:
    r = _run(tmp_path)
    _, res, _ = derive(r.run_dir, "sha256:" + "9" * 64)
    assert "evaluator_mismatch" in res["a"].evaluation.proof.reason_codes


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        ("noop", "invalid_injection"),
        ("no_witness", "witness:missing_observation"),
        ("wrong_scorer", "scorer_version_mismatch"),
        ("harness", "harness_invalid"),
        # ("mismatch", "scenario_mismatch") was here until issue 13: a scenario mismatch now
        # blocks its stratum's comparison, not the subject (test_exposed_measures.py).
    ],
)
def test_each_defect_blocks_with_its_reason(tmp_path: Path, outcome: str, code: str) -> None:
    # One faulted hard cell of subject a carries the defect; everything else is clean.
    target = next(i for i, (_, s) in enumerate(Run(tmp_path / "probe").cells("a"))
                  if s.schedule.kind == LOST_RESPONSE and s.bucket == "hard")  # fmt: skip
    r = _run(tmp_path, a=lambda i, s: outcome if i == target else "completed")
    res, files = _decide(r)
    proof = res["a"].evaluation.proof
    assert proof.decision == "ineligible"
    assert any(c.startswith(code) for c in proof.reason_codes), proof.reason_codes
    assert "results/a/scorecard.json" not in files
    assert res["b"].evaluation.proof.decision == "eligible"


# A kind the A/B spec does not schedule (its counts are the other tests' figures) gets a fault of
# its own in a variant of it.
EXTRA_FAULTS = {
    FREEZE: '[[faults]]\nid = "freeze"\nkind = "freeze_mid_tool_call"\n'
    'trigger = { tool = "write_file", ordinal = 1, phase = "dispatched" }\n'
    "parameters = { duration_ms = 500 }\n\n",
}


def test_every_noop_actuator_kind_is_rejected(tmp_path: Path) -> None:
    assert set(injected_kinds()) == set(KINDS) - {NO_FAULT} | set(EXTRA_FAULTS)
    for kind in injected_kinds():
        d = tmp_path / kind
        d.mkdir()
        spec = SPEC_AB
        if kind in EXTRA_FAULTS:
            spec = d / "spec_ab.toml"
            text = SPEC_AB.read_text().replace("[matrix]", EXTRA_FAULTS[kind] + "[matrix]")
            spec.write_text(text)
            clean, _ = _decide(_run(d / "clean", spec_path=spec))  # its good witness holds
            assert clean["a"].evaluation.proof.decision == "eligible", kind
        noop = lambda i, s, k=kind: "noop" if s.schedule.kind == k else "completed"  # noqa: E731
        r = _run(d, spec_path=spec, a=noop)
        res, _ = _decide(r)
        p = res["a"].evaluation.proof
        assert p.decision == "ineligible" and "invalid_injection" in p.reason_codes, kind
        assert any(c.startswith("witness:") for c in p.reason_codes), kind


def test_missing_hard_task_stratum_blocks(tmp_path: Path) -> None:
    r = Run(tmp_path / "run", slots_filter=lambda slots: [s for s in slots if s.bucket != "hard"])
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    res, _ = _decide(r)
    codes = res["a"].evaluation.proof.reason_codes
    assert "protocol_inconsistent" in codes
    assert any(c.startswith("missing_stratum:") and "hard" in c for c in codes), codes


def test_duplicate_cell_blocks(tmp_path: Path) -> None:
    r = Run(tmp_path / "run", slots_filter=lambda slots: [*slots, slots[0]])
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    res, _ = _decide(r)
    assert "duplicate_cell" in res["a"].evaluation.proof.reason_codes


def test_changed_attempt_budget_blocks(tmp_path: Path) -> None:
    # Evidence recorded under a spec whose cap differs from the frozen protocol's.
    text = SPEC_AB.read_text().replace("cap = 2", "cap = 5")
    r = Run(tmp_path / "run", spec_text=text)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    res, _ = _decide(r)
    assert "protocol_inconsistent" in res["a"].evaluation.proof.reason_codes
    # And attempts beyond the cap are caught from the evidence itself.
    r2 = _run(tmp_path / "2")
    cell, slot = r2.cells("a")[0]
    for n in (2, 3):
        r2.write_attempt("a", cell, slot, n, "completed")
    res2, _ = _decide(r2)
    codes = res2["a"].evaluation.proof.reason_codes
    assert "attempt_cap_exceeded" in codes and "attempt_after_final_outcome" in codes


def test_draft_protocol_is_never_eligible(tmp_path: Path) -> None:
    r = _run(tmp_path, frozen=False)
    res, files = _decide(r)
    assert all(v.evaluation.proof.decision == "ineligible" for v in res.values())
    assert "protocol_draft" in res["a"].evaluation.proof.reason_codes
    assert not [f for f in files if "scorecard" in f]


def test_retry_after_invalid_injection_is_allowed_and_retained(tmp_path: Path) -> None:
    r = _run(tmp_path, a=lambda i, s: "noop" if i == 3 else "completed")
    cell, slot = r.cells("a")[3]
    r.write_attempt("a", cell, slot, 2, "completed")
    res, _ = _decide(r)
    p = res["a"].evaluation.proof
    assert p.decision == "eligible", p.reason_codes
    t = next(t for t in res["a"].evaluation.terminal_records if t.cell_id == cell)
    assert [a.status.value for a in t.attempts] == ["INVALID_INJECTION", "COMPLETED"]


def test_subject_outcome_is_final_no_retry(tmp_path: Path) -> None:
    r = _run(tmp_path, a=lambda i, s: "failed" if i == 0 else "completed")
    cell, slot = r.cells("a")[0]
    r.write_attempt("a", cell, slot, 2, "completed")
    res, _ = _decide(r)
    assert "attempt_after_final_outcome" in res["a"].evaluation.proof.reason_codes


def test_not_comparable_after_repeated_invalid_injection(tmp_path: Path) -> None:
    r = _run(tmp_path, a=lambda i, s: "noop" if i == 1 else "completed")
    cell, slot = r.cells("a")[1]
    r.write_attempt("a", cell, slot, 2, "noop")
    res, files = _decide(r)
    p = res["a"].evaluation.proof
    assert p.not_comparable_strata == [slot.stratum]
    assert f"not_comparable:{slot.stratum}" in p.reason_codes
    report = json.loads(files["results/a/incomplete-evidence.json"])
    assert slot.stratum in report["not_comparable_strata"]


def test_missing_cells_are_listed(tmp_path: Path) -> None:
    r = _run(tmp_path, b=lambda i, s: None if i in (4, 9) else "completed")
    res, _ = _decide(r)
    rep = res["b"].report
    assert rep is not None and len(rep.missing_cell_ids) == 2
    assert rep.status_counts["MISSING"] == 2


def test_scorecard_measures(tmp_path: Path) -> None:
    def a(i: int, s) -> str:
        return "duplicate" if s.schedule.kind == LOST_RESPONSE else "completed"

    r = _run(tmp_path, a=a)
    res, _ = _decide(r)
    card = res["a"].scorecard
    assert card is not None
    assert card.overall.completion.rate is not None and card.overall.completion.rate.value == 1.0
    assert card.overall.duplicate_effects.duplicate_effects == 4
    assert card.overall.duplicate_effects.cells_with_duplicates == 4
    assert card.overall.recovery_overhead is not None
    assert card.overall.recovery_overhead.pairs == 16
    assert card.overall.recovery_overhead.extra_tool_calls_total == 0
    base = [k for k in card.strata if "fault_kind=none" in k]
    assert base and all(card.strata[k].recovery_overhead is None for k in base)


def test_overhead_is_null_without_baseline_never_zero(tmp_path: Path) -> None:
    text = SPEC_AB.read_text().replace("[matrix]\n", "[matrix]\nbaseline = false\n")
    res, files = _decide(_run_variant(tmp_path, "nobase.toml", text))
    card = res["a"].scorecard
    assert card is not None
    o = card.overall.recovery_overhead
    assert o is not None and o.pairs == 0 and o.extra_tool_calls_total is None
    rows = [
        CellScore.model_validate_json(x) for x in files["results/a/cell-scores.jsonl"].splitlines()
    ]
    assert len(rows) == card.proof.coverage.registered == 16  # no baseline cells
    assert all(c.extra_tool_calls is None and c.wall_time_ratio is None for c in rows)


def test_row_files_hold_every_cell_and_are_bound_by_hash(tmp_path: Path) -> None:
    r = _run(tmp_path, b=_noop_on_faulted(3))
    res, files = _decide(r)
    card, rep = res["a"].scorecard, res["b"].report
    assert card is not None and rep is not None
    for doc, rel, model in (
        (card.cell_scores, "results/a/cell-scores.jsonl", CellScore),
        (rep.cell_history, "results/b/cell-history.jsonl", CellHistory),
    ):
        data = files[rel]
        assert doc.file == rel.rsplit("/", 1)[1] and doc.lines == 20
        assert doc.sha256 == "sha256:" + hashlib.sha256(data).hexdigest()
        rows = [model.model_validate_json(x) for x in data.splitlines()]
        assert [x.cell_id for x in rows] == sorted(c for c, _ in r.cells(rel.split("/")[1]))
    # The report's inline list is exactly the cells whose evidence is not sealed.
    history = [
        CellHistory.model_validate_json(x)
        for x in files["results/b/cell-history.jsonl"].splitlines()
    ]
    assert rep.cells_not_witnessed == [c for c in history if c.state != "SUBJECT_OUTCOME_SEALED"]
    assert len(rep.cells_not_witnessed) == 3
    # A scorecard whose row file claims another digest still parses (the model cannot see the
    # file), but verify re-derives the rows and names the file.
    write_results(r.run_dir, files)
    rows_path = r.run_dir / "results" / "a" / "cell-scores.jsonl"
    rows_path.write_bytes(
        rows_path.read_bytes().replace(b'"duplicate_effects":0', b'"duplicate_effects":1', 1)
    )
    assert any("cell-scores.jsonl" in p for p in verify(r.run_dir, EVAL))
    assert isinstance(rep, IncompleteEvidenceReport)


def test_unregistered_cell_blocks(tmp_path: Path) -> None:
    r = _run(tmp_path)
    _, slot = r.cells("a")[0]
    r.write_attempt("a", "sha256:" + "e" * 64, slot, 1, "completed")
    res, _ = _decide(r)
    assert "unregistered_cell" in res["a"].evaluation.proof.reason_codes


def test_contradictory_records_are_invalid(tmp_path: Path) -> None:
    r = _run(tmp_path)
    cell, _ = r.cells("a")[0]
    j = r.store.journal(f"{cell[7:23]}-a1")
    j.append(AttemptEnded(cell_id=cell, attempt=1, outcome="subject_gave_up",
                          trigger_reached=False, wall_ns="5"))  # fmt: skip
    j.close()
    res, _ = _decide(r)
    assert "contradictory_attempt_ended" in res["a"].evaluation.proof.reason_codes


# --------------------------------------------------------------------------- verify / tamper


def _evaluated(tmp_path: Path) -> Run:
    r = _run(tmp_path, b=lambda i, s: "completed" if i < 12 else "noop")
    _, _, files = derive(r.run_dir, EVAL)
    write_results(r.run_dir, files)
    assert verify(r.run_dir, EVAL) == []
    return r


def test_flipping_any_byte_in_a_run_directory_fails_verify(tmp_path: Path) -> None:
    r = _evaluated(tmp_path)
    files = sorted(p for p in r.run_dir.rglob("*") if p.is_file())
    assert len(files) > 20
    for f in files:
        data = bytearray(f.read_bytes())
        for pos in {0, len(data) // 2, len(data) - 2}:
            original = data[pos]
            data[pos] = original ^ 0x01
            f.write_bytes(bytes(data))
            problems = verify(r.run_dir, EVAL)
            data[pos] = original
            f.write_bytes(bytes(data))
            assert problems, f"flip at {f.relative_to(r.run_dir)}:{pos} went unnoticed"
    assert verify(r.run_dir, EVAL) == []


def test_verify_cli_names_the_first_mismatch(tmp_path: Path) -> None:
    r = _evaluated(tmp_path)  # unsigned: the signature is tests/trust/'s subject
    assert runner.invoke(app, ["verify", "--allow-unsigned", str(r.run_dir)]).exit_code == 0
    blob = next((r.run_dir / "results/a").glob("scorecard.json"))
    blob.write_bytes(blob.read_bytes().replace(b'"completed":', b'"completed":1', 1))
    result = runner.invoke(app, ["verify", "--allow-unsigned", str(r.run_dir)])
    assert result.exit_code == 3
    assert "scorecard.json" in result.output


def test_stale_scorecard_never_survives_reevaluation(tmp_path: Path) -> None:
    r = _run(tmp_path)
    assert runner.invoke(app, ["evaluate", str(r.run_dir)]).exit_code == 0
    assert (r.run_dir / "results/b/scorecard.json").exists()
    cell, slot = r.cells("b")[0]
    r.write_attempt("b", cell, slot, 2, "completed")  # a substitution attempt appears
    assert runner.invoke(app, ["evaluate", str(r.run_dir)]).exit_code == 3
    assert not (r.run_dir / "results/b/scorecard.json").exists()


def test_truncated_journal_resumes_without_losing_records(tmp_path: Path) -> None:
    r = _run(tmp_path)
    path = r.store.journal_paths()[0]
    before = path.read_bytes()
    n_lines = before.count(b"\n")
    path.write_bytes(before + b'{"at_ns":"17","prev":"sha')  # crashed mid-record
    # Evaluation sees the torn record and refuses rather than guessing.
    with pytest.raises(Exception, match="torn"):
        derive(r.run_dir, EVAL)
    j = r.store.journal(path.stem)  # resume: the tail is quarantined, not dropped
    j.close()
    after = path.read_bytes()
    assert after.startswith(before) and after.count(b"\n") == n_lines + 1
    torn = path.with_name(path.name + ".torn-1")
    assert torn.read_bytes() == b'{"at_ns":"17","prev":"sha'
    _, _, files = derive(r.run_dir, EVAL)
    write_results(r.run_dir, files)
    assert verify(r.run_dir, EVAL) == []
    torn.write_bytes(b'{"at_ns":"18","prev":"sha')  # the quarantined bytes are tamper-evident
    assert verify(r.run_dir, EVAL)


def test_models_registered_for_schemas() -> None:
    for name in ("eligibility-proof", "incomplete-evidence-report", "publishable-scorecard"):
        assert name in MODELS


def test_outcome_names_cover_synth() -> None:
    assert {"completed", "noop", "harness"} <= set(OUTCOMES)


def test_overhead_is_a_measure_of_faulted_cells_even_in_mixed_strata(tmp_path: Path) -> None:
    # With strata by task bucket only, a stratum mixes baseline and faulted cells: each cell is
    # classified by its own kind (baseline cells are never "missing a baseline").
    text = SPEC_AB.read_text() + '\n[eligibility]\nstrata = ["task_bucket"]\n'
    res, _ = _decide(_run_variant(tmp_path, "bybucket.toml", text))
    card = res["a"].scorecard
    assert card is not None
    faulted = sum(1 for k in KINDS if k is not NO_FAULT)
    o = card.overall.recovery_overhead
    assert o is not None and o.pairs + o.missing_baseline == faulted == 16
    assert o.missing_baseline == 0  # every task has its completed baseline
    for m in card.strata.values():
        assert m.recovery_overhead is not None  # every bucket holds faulted cells
        assert m.recovery_overhead.pairs < m.completion.cells  # its baseline cells are not pairs
    assert sum(m.recovery_overhead.pairs for m in card.strata.values()) == 16  # type: ignore[union-attr]


def test_row_file_names_and_counts_are_part_of_the_documents(tmp_path: Path) -> None:
    r = _run(tmp_path, b=_noop_on_faulted(2))
    res, _ = _decide(r)
    card, rep = res["a"].scorecard, res["b"].report
    assert card is not None and rep is not None
    doc = card.model_dump(mode="json", by_alias=True)
    with pytest.raises(ValueError, match="cell_scores must name"):
        PublishableScorecard.model_validate(
            {**doc, "cell_scores": {**doc["cell_scores"], "file": "../proof.json"}}
        )
    rdoc = rep.model_dump(mode="json", by_alias=True)
    with pytest.raises(ValueError, match="cell_history must name"):
        IncompleteEvidenceReport.model_validate(
            {**rdoc, "cell_history": {**rdoc["cell_history"], "file": "x.jsonl"}}
        )
    with pytest.raises(ValueError, match="every registered cell"):
        IncompleteEvidenceReport.model_validate(
            {**rdoc, "cell_history": {**rdoc["cell_history"], "lines": 19}}
        )


def test_publication_refuses_terminal_records_other_than_the_proofs(tmp_path: Path) -> None:
    import dataclasses

    from runner.evaluator.publish.build import incomplete_report

    r = _run(tmp_path, b=_noop_on_faulted(2))
    res, _ = _decide(r)
    for subject, build in (
        ("a", lambda ev: build_scorecard(ev, r.slots)),
        ("b", lambda ev: incomplete_report(ev, [])),
    ):
        ev = res[subject].evaluation
        lines = ev.terminal_jsonl.splitlines(keepends=True)
        forged = dataclasses.replace(ev, terminal_jsonl=b"".join(lines[:-1]))
        with pytest.raises(ValueError, match="do not match the proof"):
            build(forged)
