"""EnvironmentConformanceProof against the known-answer vectors in vectors/environment/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.environment import conformance as environment
from runner.evaluator.environment.artifact import ExecutionEnvironment, load_environment
from runner.evaluator.environment.conformance import (
    CONFORMANCE_REASON_CODES,
    check_environments,
    check_pair,
    check_run,
)
from runner.vectors import environment as env_vectors
from runner.vectors.environment import render

VECTORS = env_vectors.folder()
POLICY = env_vectors.policy()

CASES = json.loads((VECTORS / "cases.json").read_text(encoding="utf-8"))


def _load(name: str) -> ExecutionEnvironment:
    return load_environment(json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8")))


def test_vectors_are_current() -> None:
    """The stored fixtures are exactly what the generator builds (hashes are known answers)."""
    for name, doc in env_vectors.build().items():
        stored = (VECTORS / name).read_text(encoding="utf-8")
        assert stored == render(doc), f"{name} is stale: run bench vectors regenerate"


def test_execution_environment_hash_known_answers() -> None:
    for name, expected in CASES["execution_environment_hashes"].items():
        env = _load(name)
        assert env.execution_environment_hash == expected
        assert env.verify() == (name != "env-j-tampered")
    assert POLICY.controlled_factors_hash() == CASES["controlled_factors_hash"]


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_known_answer_case(case: dict[str, Any]) -> None:
    envs = [_load(a) for a in case["artifacts"]]
    purpose = case["purpose"] if case["purpose"] != "run" else "cross_subject"
    proof = check_environments(envs, POLICY.factors, POLICY.sources, purpose=purpose)
    exp = case["expect"]
    assert proof.decision == exp["decision"], proof.findings
    assert list(proof.reason_codes) == exp["reason_codes"], proof.findings
    assert list(proof.stages_run) == exp["stages_run"]
    for code in exp["absent_reason_codes"]:
        assert code not in proof.reason_codes
        assert all(f.reason_code != code for f in proof.findings)
    assert proof.purpose == case["purpose"]
    assert proof.controlled_factors_hash == CASES["controlled_factors_hash"]
    assert proof.execution_environment_hashes == tuple(e.execution_environment_hash for e in envs)
    assert proof.verify()
    assert set(proof.reason_codes) <= set(CONFORMANCE_REASON_CODES)


# ------------------------------------------------------------- source identity comes first


class _Spy:
    def __init__(self) -> None:
        self.normalized = 0
        self.compared = 0


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    s = _Spy()
    real_normalize, real_within = environment.normalize, environment._within

    def normalize(name: str, raw: Any) -> Any:
        s.normalized += 1
        return real_normalize(name, raw)

    def within(*args: Any) -> Any:
        s.compared += 1
        return real_within(*args)

    monkeypatch.setattr(environment, "normalize", normalize)
    monkeypatch.setattr(environment, "_within", within)
    return s


@pytest.mark.parametrize("other", ["env-c-karma-plausible", "env-c-karma-real"])
def test_source_identity_mismatch_rejected_before_normalization_or_tolerance(
    spy: _Spy, other: str
) -> None:
    a, b = _load("env-a"), _load(other)
    fa, fb = a.observation("followers"), b.observation("followers")
    assert fa is not None and fb is not None
    # The same factor id, type and unit; both reads succeeded; both values are plausible counts.
    assert (fa.factor_id, fa.type, fa.unit) == (fb.factor_id, fb.type, fb.unit)
    assert fa.shape.ok and fb.shape.ok
    assert isinstance(fb.raw_value, int) and fb.raw_value > 0
    # Even the source *id* is the same: a relabeled karma field. Only the content hash differs.
    assert fa.source.id == fb.source.id and fa.source.contract_hash != fb.source.contract_hash

    for purpose in ("cross_subject", "overhead_pair"):
        proof = check_pair(a, b, POLICY.factors, POLICY.sources, purpose=purpose)
        assert proof.decision == "refused"
        assert proof.reason_codes == ("source_identity_mismatch",)
        assert {f.stage for f in proof.findings} == {"identity"}
        assert "normalization" not in proof.stages_run and "match_rules" not in proof.stages_run
    assert spy.normalized == 0 and spy.compared == 0


def test_positive_control_normalizes_and_compares(spy: _Spy) -> None:
    proof = check_pair(_load("env-a"), _load("env-b-within"), POLICY.factors, POLICY.sources)
    assert proof.decision == "conform" and proof.reason_codes == ()
    assert spy.normalized > 0 and spy.compared > 0


def test_the_karma_pair_would_have_conformed_on_values_alone() -> None:
    """Without the source check the plausible karma pair is indistinguishable: that is the point."""
    b = _load("env-c-karma-plausible")
    relabeled = ExecutionEnvironment.build(
        b.measured_at,
        b.observed_under,
        [
            o.model_copy(update={"source": _load("env-a").observation(o.factor_id).source})  # type: ignore[union-attr]
            for o in b.observations
        ],
    )
    proof = check_pair(_load("env-a"), relabeled, POLICY.factors, POLICY.sources)
    assert proof.decision == "conform"


def test_stricter_overhead_pair_tolerance() -> None:
    a, g = _load("env-a"), _load("env-g-overhead")  # calibration 0.50 s vs 0.65 s (30 %)
    cross = check_pair(a, g, POLICY.factors, POLICY.sources, purpose="cross_subject")
    pair = check_pair(a, g, POLICY.factors, POLICY.sources, purpose="overhead_pair")
    assert cross.decision == "conform"
    assert pair.decision == "refused" and pair.reason_codes == ("out_of_tolerance",)
    (finding,) = pair.findings
    assert finding.factor_id == "calibration_seconds" and "overhead-pair" in finding.detail
    assert cross.proof_hash != pair.proof_hash


def test_record_only_factor_never_refuses() -> None:
    from runner.evaluator.protocol.spec import Factor

    factors = [
        Factor.model_validate(
            {
                **f.model_dump(),
                "required": False,
                "on_missing_or_drift": "record_only",
            }
        )
        if f.id == "calibration_seconds"
        else f
        for f in POLICY.factors
    ]
    proof = check_pair(_load("env-a"), _load("env-d-outside"), factors, POLICY.sources)
    assert proof.decision == "conform"
    assert proof.recorded_codes == ("out_of_tolerance",)


def test_proof_is_deterministic_and_self_hashed() -> None:
    a, b = _load("env-a"), _load("env-d-outside")
    p1 = check_pair(a, b, POLICY.factors, POLICY.sources)
    p2 = check_pair(a, b, list(reversed(POLICY.factors)), list(reversed(POLICY.sources)))
    assert p1 == p2 and p1.verify()
    forged = p1.model_copy(update={"decision": "conform"})
    assert not forged.verify()


def test_run_check_of_single_artifact() -> None:
    proof = check_run(_load("env-a"), POLICY.factors, POLICY.sources)
    assert proof.scope == "run" and proof.purpose == "run" and proof.decision == "conform"
    assert "match_rules" not in proof.stages_run


def test_artifact_round_trips_through_json(tmp_path: Path) -> None:
    env = _load("env-b-within")
    again = load_environment(json.loads(json.dumps(env.to_json())))
    assert again == env and again.verify()


def test_optional_factor_may_be_absent_but_not_drift() -> None:
    from runner.evaluator.protocol.spec import Factor

    factors = [
        Factor.model_validate({**f.model_dump(), "required": False})
        if f.id == "logical_cpus"
        else f
        for f in POLICY.factors
    ]
    absent = check_pair(_load("env-a"), _load("env-e-missing"), factors, POLICY.sources)
    assert absent.decision == "conform" and absent.recorded_codes == ("missing_factor",)
    drift = check_pair(_load("env-a"), _load("env-c-karma-plausible"), factors, POLICY.sources)
    assert drift.decision == "refused" and drift.reason_codes == ("source_identity_mismatch",)
