"""Collectors read this machine; a missing tool or a failed read is a failed observation."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evaluator.environment.artifact import load_default_policy
from runner.evaluator.environment.conformance import check_run
from runner.evaluator.protocol.spec import SourceContract
from runner.runtime import envcollect
from runner.runtime.envcollect import observe, read_source


def _contract(**kw: object) -> SourceContract:
    base: dict[str, object] = {
        "id": "x",
        "provider": "python",
        "endpoint": "os.cpu_count",
        "parser": "int@1",
        "normalizer": "identity@1",
        "shape": {"parse": "int", "non_empty": True},
    }
    base.update(kw)
    return SourceContract.model_validate(base)


def test_default_policy_observes_this_machine() -> None:
    policy = load_default_policy()
    env = observe(policy)
    assert env.verify()
    assert env.observed_under == policy.controlled_factors_hash()
    assert {o.factor_id for o in env.observations} == {f.id for f in policy.factors}
    cpus = env.observation("logical_cpus")
    assert cpus is not None and cpus.shape.ok and isinstance(cpus.raw_value, int)
    cal = env.observation("calibration_seconds")
    assert cal is not None and cal.shape.ok and cal.raw_value > 0
    digest = env.observation("evaluator_digest")
    assert digest is not None and str(digest.raw_value).startswith("sha256:")
    proof = check_run(env, policy.factors, policy.sources)
    # Optional factors (the sandbox image) may be recorded as failed; required ones must hold
    # unless this machine lacks podman, which then refuses rather than guessing.
    blocking = {f.factor_id for f in proof.findings if f.action == "fail_closed"}
    assert blocking <= {"container_engine_version", "oci_runtime"}, proof.findings


def test_podman_missing_is_a_failed_read_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envcollect.shutil, "which", lambda name: None)
    policy = load_default_policy()
    env = observe(policy, only=["container_engine_version", "oci_runtime", "sandbox_image_digest"])
    for o in env.observations:
        assert not o.shape.ok and o.shape.reason_codes == ("read_failed",)
        assert o.raw_value is None and "not installed" in o.shape.details[0]
    proof = check_run(env, [f for f in policy.factors if f.id in {"oci_runtime"}], policy.sources)
    assert proof.decision == "refused" and proof.reason_codes == ("shape_failed",)


def test_command_outside_allowlist_is_refused() -> None:
    snap = read_source(_contract(provider="command", endpoint="rm -rf /nonexistent"))
    assert snap.error is not None and "not allowed" in snap.error


def test_failing_command_is_a_failed_read() -> None:
    snap = read_source(_contract(provider="podman", endpoint="image inspect afb-no-such-image:0"))
    assert snap.error is not None


def test_file_provider(tmp_path: Path) -> None:
    f = tmp_path / "osrelease"
    f.write_text("6.6.30-generic\n")
    c = _contract(
        provider="file",
        endpoint=str(f),
        parser="text@1",
        normalizer="major_minor@1",
        shape={"parse": "text", "non_empty": True},
    )
    obs = envcollect.observation("kernel_series", "string", "release", c, read_source(c), "t")
    assert obs.shape.ok and obs.raw_value == "6.6.30-generic" and obs.normalized_value == "6.6"
    missing = read_source(c.model_copy(update={"endpoint": str(tmp_path / "nope")}))
    assert missing.error is not None


def test_unknown_python_endpoint_and_bad_values() -> None:
    assert read_source(_contract(endpoint="os.getcwd")).error is not None
    # A value that is not what the parser declares is a shape failure, not a value.
    c = _contract(endpoint="platform.release")  # text read through an int parser
    obs = envcollect.observation("logical_cpus", "integer", "count", c, read_source(c), "t")
    assert not obs.shape.ok and obs.shape.reason_codes == ("body_not_parseable",)


def test_calibration_is_a_positive_duration() -> None:
    assert 0 < envcollect.calibration_seconds(4 * 1024 * 1024) < 60
