"""`bench env observe --json` and `bench env check` exit codes: 0 conform, 4 refused, 2 input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import runner.cli.env  # noqa: F401  (registers `bench env`)
from runner.cli.app import app
from runner.vectors.environment import folder, spec_path

SPEC, VECTORS = spec_path(), folder()

runner_ = CliRunner()


def _v(name: str) -> str:
    return str(VECTORS / f"{name}.json")


@pytest.mark.runtime  # observes this machine's Podman and OCI runtime: root
def test_observe_json_then_check(tmp_path: Path) -> None:
    res = runner_.invoke(app, ["env", "observe", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "afb.environment/1"
    assert doc["execution_environment_hash"].startswith("sha256:")
    a = tmp_path / "a.json"
    a.write_text(res.stdout)
    ok = runner_.invoke(app, ["env", "check", str(a), str(a)])
    assert ok.exit_code == 0, ok.output
    # Tamper with one observed value without re-hashing: refused.
    for o in doc["observations"]:
        if o["factor_id"] == "logical_cpus":
            o["raw_value"] = o["normalized_value"] = 4096
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    bad = runner_.invoke(app, ["env", "check", str(a), str(b)])
    assert bad.exit_code == 4
    assert "artifact_hash_mismatch" in bad.output


def test_check_with_spec_conform_and_refused() -> None:
    ok = runner_.invoke(app, ["env", "check", _v("env-a"), _v("env-b-within"), "--spec", str(SPEC)])
    assert ok.exit_code == 0, ok.output
    assert "decision: conform" in ok.output

    karma = runner_.invoke(
        app, ["env", "check", _v("env-a"), _v("env-c-karma-real"), "--spec", str(SPEC)]
    )
    assert karma.exit_code == 4
    assert "source_identity_mismatch" in karma.output
    assert "out_of_tolerance" not in karma.output


def test_check_purpose_overhead_pair() -> None:
    args = ["env", "check", _v("env-a"), _v("env-g-overhead"), "--spec", str(SPEC)]
    assert runner_.invoke(app, args).exit_code == 0
    res = runner_.invoke(app, [*args, "--purpose", "overhead_pair", "--json"])
    assert res.exit_code == 4
    proof = json.loads(res.stdout)
    assert proof["decision"] == "refused" and proof["reason_codes"] == ["out_of_tolerance"]


def test_check_input_errors_exit_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text('{"not": "an artifact"}')
    assert runner_.invoke(app, ["env", "check", str(junk), _v("env-a")]).exit_code == 2
    assert runner_.invoke(app, ["env", "check", str(tmp_path / "none.json")]).exit_code == 2
    res = runner_.invoke(app, ["env", "check", _v("env-a"), "--purpose", "run"])
    assert res.exit_code == 2
