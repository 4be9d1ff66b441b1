"""Every policy setting in policy_hash is read by the code it names (issue 13): one test per
setting showing that it changes the output; a draft never reaches a scorecard or the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.build import build_scorecard
from runner.evaluator.publish.compare import compare
from runner.evaluator.publish.models import PublishableScorecard
from runner.evaluator.publish.registry import Registry
from runner.evaluator.publish.results import derive, write_results
from runner.evaluator.verdict.eligibility import seal_proof
from tests.evidence.synth import SPEC_AB, Run

EVAL = evaluator_digest()


def _spec(tmp_path: Path, name: str, extra: str = "", replace: tuple[str, str] = ("", "")) -> Path:
    path = tmp_path / name
    path.write_text(SPEC_AB.read_text().replace(*replace) + extra)
    return path


def _evaluated(d: Path, spec: Path = SPEC_AB) -> tuple[Path, dict[str, bytes]]:
    r = Run(d, spec_path=spec)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    _, _, files = derive(r.run_dir, EVAL)
    write_results(r.run_dir, files)
    return r.run_dir, files


# ------------------------------------------------------------------------------ [comparison]


def test_require_equal_decides_which_identities_must_match(tmp_path: Path) -> None:
    rule = '\n[comparison]\nrequire_equal = ["cell_set_hash"]\n'
    same = _spec(tmp_path, "same.toml", rule)
    other = _spec(tmp_path, "other.toml", rule, ("cap = 2", "cap = 3"))
    r1, _ = _evaluated(tmp_path / "r1", same)
    r2, _ = _evaluated(tmp_path / "r2", other)
    a, b = r1 / "results/a/scorecard.json", r2 / "results/b/scorecard.json"
    comparison, reasons = compare([a, b])
    assert reasons == [] and comparison is not None  # protocol hashes differ, allowed here
    # The default rules (protocol_hash too) refuse the same pair: the strictest card decides.
    d1, _ = _evaluated(tmp_path / "d1")
    _, reasons = compare([d1 / "results/a/scorecard.json", b])
    assert "protocol_hash_differs" in reasons


def test_require_distinct_subjects(tmp_path: Path) -> None:
    run, _ = _evaluated(tmp_path / "d")
    a = run / "results/a/scorecard.json"
    assert "subjects_not_distinct" in compare([a, a])[1]
    lax = _spec(tmp_path, "lax.toml", "\n[comparison]\nrequire_distinct_subjects = false\n")
    run2, _ = _evaluated(tmp_path / "lax", lax)
    a2 = run2 / "results/a/scorecard.json"
    comparison, reasons = compare([a2, a2])
    assert reasons == [] and comparison is not None and len(comparison.subjects) == 2


def test_require_environment_conformance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def refusing(cards):  # the environment stage finding the runs non-conforming
        calls.append(len(cards))
        return None, ["environment:factor_drift"]

    import runner.evaluator.publish.compare as compare_mod

    monkeypatch.setattr(compare_mod, "check_pairs", refusing)
    run, _ = _evaluated(tmp_path / "d")
    pair = [run / "results/a/scorecard.json", run / "results/b/scorecard.json"]
    assert compare(pair) == (None, ["environment:factor_drift"]) and calls == [2]
    lax = _spec(tmp_path, "lax.toml", "\n[comparison]\nrequire_environment_conformance = false\n")
    run2, files = _evaluated(tmp_path / "lax", lax)
    pair2 = [run2 / "results/a/scorecard.json", run2 / "results/b/scorecard.json"]
    comparison, reasons = compare(pair2)
    assert reasons == [] and comparison is not None and comparison.environment_conformance is None
    assert calls == [2]  # not consulted at all
    card = json.loads(files["results/a/scorecard.json"])
    assert card["comparison_rules"]["require_environment_conformance"] is False


# ----------------------------------------------------------------------- [publication].outputs


def test_outputs_decide_the_written_formats(tmp_path: Path) -> None:
    _, both = _evaluated(tmp_path / "d")
    assert {f for f in both if f.endswith(".md")} == {
        "results/a/scorecard.md", "results/b/scorecard.md", "results/comparison.md"
    }  # fmt: skip
    json_only = _spec(tmp_path, "json.toml", '\n[publication]\noutputs = ["json"]\n')
    _, files = _evaluated(tmp_path / "j", json_only)
    assert not [f for f in files if f.endswith(".md")]
    assert {f for f in both if not f.endswith(".md")} == set(files)


def test_outputs_must_include_json(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="json"):
        load_spec(_spec(tmp_path, "md.toml", '\n[publication]\noutputs = ["markdown"]\n'))


# -------------------------------------------------------------------------- [scoring].measures


def test_measures_decide_what_a_scorecard_carries(tmp_path: Path) -> None:
    _, full = _evaluated(tmp_path / "d")
    card = json.loads(full["results/a/scorecard.json"])
    assert set(card["overall"]) == {"completion", "duplicate_effects", "recovery_overhead"}
    only = _spec(
        tmp_path, "completion.toml",
        replace=('measures = ["completion", "duplicate_effects", "recovery_overhead"]',
                 'measures = ["completion"]'),
    )  # fmt: skip
    _, files = _evaluated(tmp_path / "c", only)
    card = json.loads(files["results/a/scorecard.json"])
    assert card["measures"] == ["completion"]
    # Absent, not zero or null: the keys are not there at all.
    for group in [card["overall"], *card["strata"].values()]:
        assert set(group) == {"completion"}
    assert b"duplicate_effects" not in files["results/comparison.json"]
    # And a scorecard claiming a measure it does not carry does not validate.
    with pytest.raises(ValueError, match="exactly the measures"):
        PublishableScorecard.model_validate(
            {**card, "measures": ["completion", "recovery_overhead"]}
        )


# ---------------------------------------------------------------- no draft ever publishes


def test_no_path_from_a_draft_to_a_scorecard_or_the_registry(tmp_path: Path) -> None:
    for key in ("[eligibility]", "[publication]"):
        with pytest.raises(InputError, match="require_frozen"):
            load_spec(_spec(tmp_path, "draft.toml", f"\n{key}\nrequire_frozen = false\n"))
    # A forged proof that says "draft" but is eligible and correctly sealed is still refused by
    # the builder, the model and the registry.
    r = Run(tmp_path / "run")
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    _, res, files = derive(r.run_dir, EVAL)
    write_results(r.run_dir, files)
    ev = res["a"].evaluation
    draft = seal_proof({**ev.proof.model_dump(by_alias=True), "protocol_status": "draft"})
    import dataclasses

    with pytest.raises(ValueError, match="frozen"):
        build_scorecard(dataclasses.replace(ev, proof=draft), r.slots)
    doc = json.loads(files["results/a/scorecard.json"])
    forged = {**doc, "proof": draft.model_dump(mode="json", by_alias=True),
              "proof_hash": draft.proof_hash}  # fmt: skip
    with pytest.raises(ValueError, match="frozen"):
        PublishableScorecard.model_validate(forged)
    path = tmp_path / "forged.json"
    path.write_bytes(canonical_bytes(forged) + b"\n")
    with pytest.raises(InputError):
        Registry(tmp_path / "reg.jsonl").add(path)
    assert not (tmp_path / "reg.jsonl").exists()


def test_registry_checks_derived_from(tmp_path: Path) -> None:
    run, files = _evaluated(tmp_path / "d")
    reg = Registry(tmp_path / "reg.jsonl")
    first = reg.add(run / "results/a/scorecard.json").scorecard_hash
    doc = json.loads(files["results/b/scorecard.json"])
    b_first = reg.add(run / "results/b/scorecard.json").scorecard_hash
    unknown = "sha256:" + "7" * 64
    for derived, flag, match in (
        (unknown, None, "not in the registry"),  # the card's own link must be registered
        (b_first, unknown, "differs"),  # the flag cannot contradict the card
        (first, None, "another subject's"),  # a regrade links the same subject's scorecard
    ):
        path = tmp_path / "linked.json"
        path.write_bytes(canonical_bytes({**doc, "derived_from": derived}) + b"\n")
        with pytest.raises(InputError, match=match):
            reg.add(path, flag)
    path.write_bytes(canonical_bytes({**doc, "derived_from": b_first}) + b"\n")
    assert reg.add(path).derived_from == b_first
