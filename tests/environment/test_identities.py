"""Observed values never enter protocol_hash; the controlled-factor rules do."""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.environment.artifact import policy_of
from runner.evaluator.evidence.shape import ResponseSnapshot
from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.spec import Tolerance
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.envcollect import observe

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "specs" / "example.toml"
# Pinned so that concurrent edits to the evaluator sources cannot move the hash mid-test.
EVALUATOR = "sha256:" + "0" * 64


def _fake(cpus: int, kernel: str, seconds: float) -> dict[str, object]:
    return {
        "os-cpu-count": lambda c: ResponseSnapshot(body=str(cpus).encode()),
        "kernel-release": lambda c: ResponseSnapshot(body=kernel.encode()),
        "calibration-sha256": lambda c: ResponseSnapshot(body=str(seconds).encode()),
    }


def test_observed_values_never_change_protocol_hash() -> None:
    spec = load_spec(EXAMPLE)
    before = compute(spec, EXAMPLE, evaluator=EVALUATOR)
    small = observe(spec, readers=_fake(2, "6.1.0-18-amd64", 0.9))  # type: ignore[arg-type]
    big = observe(spec, readers=_fake(128, "6.12.3", 0.05))  # type: ignore[arg-type]
    assert small.execution_environment_hash != big.execution_environment_hash
    assert small.observed_under == big.observed_under == before.controlled_factors_hash
    after = compute(spec, EXAMPLE, evaluator=EVALUATOR)
    assert after == before


def test_a_rule_change_changes_protocol_hash() -> None:
    spec = load_spec(EXAMPLE)
    before = compute(spec, EXAMPLE, evaluator=EVALUATOR)
    factors = [
        f.model_copy(update={"tolerance": Tolerance(relative_percent=25)})
        if f.id == "calibration_seconds"
        else f
        for f in spec.factors
    ]
    changed = compute(spec.model_copy(update={"factors": factors}), EXAMPLE, evaluator=EVALUATOR)
    assert changed.controlled_factors_hash != before.controlled_factors_hash
    assert changed.policy_hash != before.policy_hash
    assert changed.protocol_hash != before.protocol_hash
    # A source-contract change (e.g. a parser version) is a rule change too.
    sources = [
        s.model_copy(update={"parser": "int@2"}) if s.id == "os-cpu-count" else s
        for s in spec.sources
    ]
    moved = compute(spec.model_copy(update={"sources": sources}), EXAMPLE, evaluator=EVALUATOR)
    assert moved.protocol_hash != before.protocol_hash


def test_controlled_factors_hash_agrees_with_identities() -> None:
    spec = load_spec(EXAMPLE)
    ids = compute(spec, EXAMPLE, evaluator=EVALUATOR)
    assert policy_of(spec.factors, spec.sources).controlled_factors_hash() == (
        ids.controlled_factors_hash
    )
