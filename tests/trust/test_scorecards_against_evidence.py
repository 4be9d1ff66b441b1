"""`bench compare` and `bench registry add` take a scorecard only with its bundle, signed by a
trusted key and re-derived from the bundle's evidence; everything else is refused, naming why.

Negative first: hand-edited measures, a scorecard made up for an ineligible subject, a withdrawn
card nudged so its hash changes, environment fields nulled, a loose copy, an unsigned or
re-evaluated (forged) bundle, a missing registry.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.cli.options import registry_path
from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.inputs import project_root
from tests.keys import TestKey

cli = CliRunner()
A, B = "results/a/scorecard.json", "results/b/scorecard.json"


@pytest.fixture
def registry(tmp_path: Path, key: TestKey) -> Path:
    path = tmp_path / "registry" / "registry.jsonl"
    res = cli.invoke(app, ["registry", "init", "--registry", str(path)])
    assert res.exit_code == 0, res.output
    return path


def _compare(reg: Path, out: Path, *cards: Path, unsigned: bool = False) -> tuple[int, str]:
    flags = ["--allow-unsigned"] if unsigned else []
    args = ["compare", *map(str, cards), "--out", str(out), "--registry", str(reg), *flags]
    res = cli.invoke(app, args)
    return res.exit_code, res.output


def _add(reg: Path, card: Path) -> tuple[int, str]:
    res = cli.invoke(app, ["registry", "add", str(card), "--registry", str(reg)])
    return res.exit_code, res.output


def _edit(card: Path, change: Callable[[dict[str, object]], None]) -> None:
    doc = json.loads(card.read_bytes())
    change(doc)
    card.write_bytes(canonical_bytes(doc) + b"\n")


def _no_duplicates(doc: dict[str, object]) -> None:
    overall = doc["overall"]
    assert isinstance(overall, dict)
    d = overall["duplicate_effects"]
    d["duplicate_effects"], d["cells_with_duplicates"] = 0, 0


def _nulled_environment(doc: dict[str, object]) -> None:
    # environment fields nulled and the conformance requirement they would trigger dropped
    doc["environment_conformance"] = None
    doc["execution_environment_hash"] = None
    rules = doc["comparison_rules"]
    assert isinstance(rules, dict) and rules["require_environment_conformance"] is True
    rules["require_environment_conformance"] = False


def test_a_signed_bundle_compares_and_registers(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path
) -> None:
    run = make_run()
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 0, output
    assert (tmp_path / "cmp/comparison.json").is_file()
    assert _add(registry, run / A)[0] == 0
    code, output = _add(registry, run / A)  # the same scorecard twice: refused, named
    assert code == 2 and "already registered" in output
    assert cli.invoke(app, ["registry", "list", "--registry", str(registry)]).exit_code == 0


@pytest.mark.parametrize(
    ("edit", "field"),
    [(_no_duplicates, "/overall/duplicate_effects"), (_nulled_environment, "/comparison_rules")],
    ids=["hand-edited-measures", "nulled-environment"],
)
def test_an_edited_scorecard_is_refused(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path,
    edit: Callable[[dict[str, object]], None], field: str,
) -> None:  # fmt: skip
    run = make_run()
    _edit(run / B, edit)
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 4 and "results/b/scorecard.json: changed since it was signed" in output
    assert not (tmp_path / "cmp").exists()
    code, output = _add(registry, run / B)
    assert code == 3 and "changed since it was signed" in output
    # Even when unsigned local runs are allowed, the evidence does not derive it.
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B, unsigned=True)
    assert code == 4 and "not what the bundle's evidence derives" in output, output
    assert f"first differing field {field}" in output
    assert registry.read_bytes() == b""


def test_a_scorecard_for_an_ineligible_subject_is_refused(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path
) -> None:
    run = make_run("b-ineligible")
    assert not (run / B).exists()
    shutil.copyfile(run / A, run / B)  # a valid, eligible card where b has none
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 4 and "not signed" in output
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B, unsigned=True)
    assert code == 4 and "derives no scorecard for 'b'" in output, output
    assert _add(registry, run / B)[0] == 3


def test_a_withdrawn_card_nudged_still_does_not_compare(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path
) -> None:
    run = make_run()
    assert _add(registry, run / A)[0] == 0
    entry = json.loads(registry.read_bytes().splitlines()[0])
    res = cli.invoke(app, ["registry", "withdraw", entry["scorecard_hash"], "--adjudication",
                           "grader bug", "--registry", str(registry)])  # fmt: skip
    assert res.exit_code == 0, res.output
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 4 and "withdrawn:" in output

    def nudge(doc: dict[str, object]) -> None:
        overall = doc["overall"]
        assert isinstance(overall, dict)
        overall["completion"]["pre_trigger_failures"] += 1

    _edit(run / A, nudge)  # a new hash: no longer the withdrawn one ...
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 4 and "changed since it was signed" in output  # ... but not the evidence's
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B, unsigned=True)
    assert code == 4 and "not what the bundle's evidence derives" in output


def test_a_loose_scorecard_is_refused(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path
) -> None:
    run = make_run()
    loose = tmp_path / "scorecard.json"
    shutil.copyfile(run / A, loose)
    code, output = _compare(registry, tmp_path / "cmp", loose, run / B, unsigned=True)
    assert code == 4 and "accepted only inside its bundle" in output
    code, output = _add(registry, loose)
    assert code == 3 and "accepted only inside its bundle" in output


def test_an_unsigned_bundle_is_refused_unless_allowed_for_a_local_comparison(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path
) -> None:
    run = make_run(signed=False)
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 4 and "signatures/run.dsse.json: missing" in output
    code, output = _add(registry, run / A)
    assert code == 3 and "missing" in output
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B, unsigned=True)
    assert code == 0, output
    # registry add has no opt-out: publication needs a signature
    res = cli.invoke(app, ["registry", "add", str(run / A), "--registry", str(registry),
                           "--allow-unsigned"])  # fmt: skip
    assert res.exit_code == 2


def test_a_forged_bundle_reevaluated_from_rewritten_journals_is_refused(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path
) -> None:
    # The attack: rewrite journals with recomputed chains and re-run `bench evaluate`; the
    # bundle is then internally consistent (it re-derives), and only the signature tells.
    honest = make_run("b-ineligible")
    forged = make_run(signed=False)  # consistent journals in which b is publishable
    shutil.copytree(honest / "signatures", forged / "signatures")
    code, output = _compare(registry, tmp_path / "cmp", forged / A, forged / B)
    assert code == 4 and "changed since it was signed" in output
    assert _add(registry, forged / B)[0] == 3
    assert cli.invoke(app, ["reproduce", str(forged)]).exit_code == 3


def test_a_bundle_signed_by_an_untrusted_key_is_refused(
    make_run: Callable[..., Path], registry: Path, tmp_path: Path, other_key: TestKey
) -> None:
    run = other_key.sign(make_run(signed=False))
    code, output = _compare(registry, tmp_path / "cmp", run / A, run / B)
    assert code == 4 and "untrusted key" in output
    assert _add(registry, run / A)[0] == 3


def test_a_missing_registry_is_an_error(make_run: Callable[..., Path], tmp_path: Path,
                                        key: TestKey) -> None:  # fmt: skip
    run = make_run()
    missing = tmp_path / "nowhere.jsonl"
    code, output = _compare(missing, tmp_path / "cmp", run / A, run / B)
    assert code == 2 and "no registry here" in output
    assert _add(missing, run / A)[0] == 2 and not missing.exists()
    res = cli.invoke(app, ["registry", "list", "--registry", str(missing)])
    assert res.exit_code == 2 and "no registry here" in res.output


def test_the_default_registry_is_the_repositorys_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert registry_path(None) == project_root() / "registry" / "registry.jsonl"
