"""`bench reproduce`: REPRODUCED only on byte equality; otherwise the first differing field."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.reproduce import first_difference, reproduce
from tests.evidence.synth import evaluated_bundle

EVAL = evaluator_digest()


def _bundle(tmp_path: Path) -> Path:
    return evaluated_bundle(tmp_path, EVAL)


def test_clean_bundle_reproduces(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    assert reproduce(bundle, EVAL) == []
    result = CliRunner().invoke(app, ["reproduce", str(bundle)])
    assert result.exit_code == 0, result.output
    assert "REPRODUCED" in result.output


def test_one_byte_of_evidence_changed_fails_and_names_why(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    journal = sorted((bundle / "journals").glob("*.jsonl"))[3]
    data = bytearray(journal.read_bytes())
    i = data.index(b'"committed_effects":') + len(b'"committed_effects":')
    data[i] = ord("7") if data[i] != ord("7") else ord("8")
    journal.write_bytes(bytes(data))
    problems = reproduce(bundle, EVAL)
    assert problems
    assert any(
        "chain broken" in p or "differ" in p or "first differing field" in p for p in problems
    )
    result = CliRunner().invoke(app, ["reproduce", str(bundle)])
    assert result.exit_code == 3 and "NOT REPRODUCED" in result.output


def test_changed_evaluator_fails_naming_the_field(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    problems = reproduce(bundle, "sha256:" + "5" * 64)
    assert any("first differing field" in p and "proof.json" in p for p in problems), problems


def test_published_result_edited_is_named(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    card = bundle / "results" / "b" / "scorecard.json"
    card.write_bytes(
        card.read_bytes().replace(b'"cells_with_duplicates":', b'"cells_with_duplicates":9', 1)
    )
    problems = reproduce(bundle, EVAL)
    assert any("scorecard.json: first differing field" in p for p in problems), problems


def test_first_difference() -> None:
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == "/a/1/b"
    assert first_difference({"a": 1}, {"a": 1}) is None
    assert first_difference([1, 2], [1]) == "/1"
