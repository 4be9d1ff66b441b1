"""A run's environment artifact names its sandbox image (id and input digest), and swe-lite's
controlled-factor rules (match exact) refuse a comparison across different images."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.environment.conformance import check_environments
from runner.evaluator.evidence.shape import ResponseSnapshot
from runner.evaluator.protocol.spec import SourceContract
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.attest import IMAGE_ID_FACTOR, IMAGE_INPUTS_FACTOR, image_of
from runner.runtime import envcollect
from runner.runtime.envcollect import observe, read_source

ROOT = Path(__file__).resolve().parents[2]
SPECS = [ROOT / "specs" / "swe-lite.toml", ROOT / "specs" / "swe-lite-smoke.toml"]
Reader = Callable[[SourceContract], ResponseSnapshot]


def _body(text: str) -> Reader:
    return lambda c: ResponseSnapshot(body=text.encode())


def _machine(image_id: str, input_digest: str) -> dict[str, Reader]:
    """One fixed machine (every source of swe-lite faked) running the given image."""
    inspect = json.dumps(
        [{"Id": image_id, "Labels": {"org.agent-fault-bench.input-digest": input_digest}}]
    )
    return {
        "os-cpu-count": _body("8"),
        "psutil-memory-total": _body(str(16 * 1024**3)),
        "kernel-release": _body("6.1.0-18-amd64"),
        "podman-version": _body('{"Client": {"Version": "4.3.1"}}'),
        "podman-oci-runtime": _body('{"host": {"ociRuntime": {"name": "runc"}}}'),
        "python-implementation": _body("CPython"),
        "python-version": _body("3.11.2"),
        "evaluator-digest": _body("sha256:" + "0" * 64),
        "calibration-sha256-64mib": _body("0.1"),
        "sandbox-image-id": _body(inspect),
        "sandbox-image-input-digest": _body(inspect),
    }


A_ID, B_ID = "a" * 64, "b" * 64
INPUTS = "sha256:" + "c" * 64


@pytest.mark.parametrize("spec_path", SPECS, ids=[p.name for p in SPECS])
def test_image_factors_are_controlled_exactly(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    factors = {f.id: f for f in spec.factors}
    for fid in (IMAGE_ID_FACTOR, IMAGE_INPUTS_FACTOR):
        assert factors[fid].match == "exact" and factors[fid].required
    env = observe(spec, readers=_machine(A_ID, INPUTS))
    assert {o.factor_id for o in env.observations} == set(factors)
    assert image_of(env) == {"id": A_ID, "input_digest": INPUTS}
    same = observe(spec, readers=_machine(A_ID, INPUTS))
    assert check_environments([env, same], spec.factors, spec.sources).conform


def test_bench_env_check_refuses_two_runs_on_different_images(tmp_path: Path) -> None:
    spec_path = SPECS[0]
    spec = load_spec(spec_path)
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    for path, image_id, inputs in ((a, A_ID, INPUTS), (b, B_ID, INPUTS), (c, A_ID, INPUTS)):
        env = observe(spec, readers=_machine(image_id, inputs))
        path.write_text(json.dumps(env.to_json()))
    runner = CliRunner()
    refused = runner.invoke(app, ["env", "check", str(a), str(b), "--spec", str(spec_path)])
    assert refused.exit_code == 4, refused.output
    assert "value_mismatch" in refused.output and IMAGE_ID_FACTOR in refused.output
    ok = runner.invoke(app, ["env", "check", str(a), str(c), "--spec", str(spec_path)])
    assert ok.exit_code == 0, ok.output
    # Same id under another declared input digest (a relabelled image) is refused too.
    d = tmp_path / "d.json"
    env = observe(spec, readers=_machine(A_ID, "sha256:" + "d" * 64))
    d.write_text(json.dumps(env.to_json()))
    relabelled = runner.invoke(app, ["env", "check", str(a), str(d), "--spec", str(spec_path)])
    assert relabelled.exit_code == 4 and IMAGE_INPUTS_FACTOR in relabelled.output


def test_image_argument_is_the_runs_image_or_a_failed_read(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(SPECS[0])
    contract = next(s for s in spec.sources if s.id == "sandbox-image-id")
    seen: list[list[str]] = []

    def fake(argv: list[str], timeout: float = 0) -> ResponseSnapshot:
        seen.append(argv)
        return ResponseSnapshot(body=b"[]")

    monkeypatch.setattr(envcollect, "read_command", fake)
    read_source(contract, image="localhost/afb-swe-lite:0123456789ab")
    assert seen == [["podman", "image", "inspect", "localhost/afb-swe-lite:0123456789ab"]]
    missing = read_source(contract)
    assert missing.error is not None and "none was given" in missing.error and len(seen) == 1
