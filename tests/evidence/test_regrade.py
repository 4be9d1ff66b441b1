"""`bench regrade` (issue 13): old evidence, this evaluator, a new directory whose scorecards
link the old ones by derived_from; the old directory is never touched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.canonical import fast_digest
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.publish.registry import Registry
from runner.evaluator.publish.regrade import regrade
from runner.evaluator.publish.results import derive
from runner.evaluator.publish.resultschemas import policy_matches
from tests.evidence.synth import evaluated_run

EVAL = evaluator_digest()
OLD = "sha256:" + "1" * 64  # the evaluator the evidence was recorded (and first judged) under
PUBLISHED = Path(__file__).resolve().parents[2] / "vectors" / "published"
cli = CliRunner()


def _tree(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def _old_run(tmp_path: Path, b: str = "completed") -> Path:
    return evaluated_run(tmp_path / "old", b, OLD)


def test_regrade_writes_a_new_directory_linked_to_the_old_scorecards(tmp_path: Path) -> None:
    old = _old_run(tmp_path)
    before = _tree(old)
    # This evaluator alone refuses the old evidence...
    _, res, _ = derive(old, EVAL)
    assert "evaluator_mismatch" in res["a"].evaluation.proof.reason_codes
    # ...a regrade judges it, into a new directory.
    out = tmp_path / "new"
    done = regrade(old, out, EVAL)
    assert _tree(old) == before  # the old directory is untouched
    for subject in ("a", "b"):
        old_card = (old / f"results/{subject}/scorecard.json").read_bytes()
        card = done.results[subject].scorecard
        assert card is not None
        assert card.derived_from == fast_digest(json.loads(old_card)) == done.derived_from[subject]
        assert card.evaluator_digest == EVAL and card.proof.recorded_evaluator_digest == OLD
        assert (
            json.loads((out / f"results/{subject}/scorecard.json").read_bytes())["derived_from"]
            == card.derived_from
        )
    record = json.loads((out / "results/regrade.json").read_bytes())
    assert record["recorded_evaluator_digest"] == OLD and record["evaluator_digest"] == EVAL
    assert (out / "protocol.json").read_bytes() == (old / "protocol.json").read_bytes()
    # Registered as derived: only once the old scorecard is in the registry.
    reg = Registry(tmp_path / "reg.jsonl")
    with pytest.raises(InputError, match="not in the registry"):
        reg.add(out / "results/a/scorecard.json")
    reg.add(old / "results/a/scorecard.json")
    entry = reg.add(out / "results/a/scorecard.json")
    assert entry.derived_from == done.derived_from["a"]
    # A second regrade never overwrites the first.
    with pytest.raises(InputError, match="already exists"):
        regrade(old, out, EVAL)
    with pytest.raises(InputError, match="outside the source"):
        regrade(old, old / "inside", EVAL)


def test_regrade_judges_everything_but_the_evaluator(tmp_path: Path) -> None:
    old = _old_run(tmp_path, b="noop")  # b's injections were never witnessed
    done = regrade(old, tmp_path / "new", EVAL)
    assert done.results["b"].scorecard is None
    assert "invalid_injection" in done.results["b"].evaluation.proof.reason_codes
    assert "b" not in done.derived_from  # no old scorecard to derive from


def test_regrade_refuses_a_policy_other_than_the_frozen_one(tmp_path: Path) -> None:
    old = _old_run(tmp_path)
    rp = read_protocol(old)
    assert policy_matches(rp)
    edited = rp.model_copy(update={"spec_text": rp.spec_text.replace("cap = 2", "cap = 3")})
    assert not policy_matches(edited)


def _published_v2() -> list[Path]:
    return sorted(
        p.parents[2]
        for p in PUBLISHED.glob("*/results/*/scorecard.json")
        if json.loads(p.read_bytes())["schema"] == "afb.scorecard/2"
    )


@pytest.mark.skipif(not _published_v2(), reason="no afb.scorecard/2 bundle in vectors/published")
def test_regrade_cli_on_a_published_bundle(tmp_path: Path) -> None:
    bundle = _published_v2()[0]
    before = _tree(bundle)
    out = tmp_path / "regraded"
    result = cli.invoke(app, ["regrade", str(bundle), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _tree(bundle) == before
    for card_path in sorted((bundle / "results").glob("*/scorecard.json")):
        new = json.loads((out / card_path.relative_to(bundle)).read_bytes())
        assert new["derived_from"] == fast_digest(json.loads(card_path.read_bytes()))
        assert new["schema"] == "afb.scorecard/3"


def test_a_regraded_directory_verifies_and_its_record_is_bound(tmp_path: Path) -> None:
    from runner.evaluator.publish.results import judging_evaluator, verify

    old = _old_run(tmp_path)
    out = tmp_path / "new"
    regrade(old, out, EVAL)
    assert judging_evaluator(out) == EVAL and judging_evaluator(old) == OLD
    assert verify(out, EVAL) == []
    # bench evaluate on it keeps it a regrade (the record is re-emitted as it was)
    _, res, files = derive(out, EVAL)
    assert files["results/regrade.json"] == (out / "results/regrade.json").read_bytes()
    assert res["a"].scorecard is not None and res["a"].scorecard.derived_from is not None
    # a derived_from pointing elsewhere no longer matches the written scorecards
    record = out / "results/regrade.json"
    doc = json.loads(record.read_bytes())
    doc["derived_from"]["a"] = "sha256:" + "2" * 64
    record.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    assert any("results/a/scorecard.json" in p for p in verify(out, EVAL))
    # a record that is not canonical JSON of the schema is refused outright
    record.write_bytes(b'{"schema": "afb.regrade/1"}\n')
    assert any("regrade.json" in p for p in verify(out, EVAL))
