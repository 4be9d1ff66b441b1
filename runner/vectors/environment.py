"""Environment vectors (vectors/environment/*.json), written by `bench vectors regenerate`;
tests/environment/test_conformance.py checks the stored files equal a rebuild and holds the
conformance proof to every case.

Every artifact is built from explicit observations (fixed times, fixed values) under the policy of
vectors/environment/spec.toml; `cases.json` lists each check and its expected decision.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from runner.evaluator.core.inputs import project_root
from runner.evaluator.environment.artifact import (
    EnvironmentPolicy,
    ExecutionEnvironment,
    FactorObservation,
    ShapeRecord,
    SourceRef,
    policy_of,
)
from runner.evaluator.environment.normalize import normalize
from runner.evaluator.protocol.spec import SourceContract
from runner.evaluator.protocol.specload import load_spec

T0 = "2025-01-01T00:00:00.000000Z"


def folder(root: Path | None = None) -> Path:
    return (root or project_root()) / "vectors" / "environment"


def spec_path(root: Path | None = None) -> Path:
    """The spec whose [[factors]] and [[sources]] are the vectors' policy."""
    return folder(root) / "spec.toml"


@functools.cache
def _policy(spec: Path) -> EnvironmentPolicy:
    s = load_spec(spec)
    return policy_of(s.factors, s.sources)


def policy(root: Path | None = None) -> EnvironmentPolicy:
    return _policy(spec_path(root))


def karma(pol: EnvironmentPolicy) -> SourceContract:
    """The karma-vs-followers relabeling: the same source id, endpoint, parser and normalizer, but
    the field path reads karma. Individually plausible, the read succeeds; only the content hash
    differs."""
    return pol.source("people-followers").model_copy(update={"field_path": "$.karma"})


def affinity(pol: EnvironmentPolicy) -> SourceContract:
    """Host capacity vs allocation: both give a plausible logical-CPU count, from different
    sources."""
    return SourceContract(
        id="sched-affinity",
        provider="python",
        endpoint="os.sched_getaffinity",
        parser="int@1",
        normalizer="identity@1",
        shape=pol.source("os-cpu-count").shape,
    )


def obs(
    pol: EnvironmentPolicy,
    factor_id: str,
    raw: Any,
    *,
    source: SourceContract | None = None,
    normalized: Any = ...,
    shape_reasons: tuple[str, ...] = (),
    at: str = T0,
) -> FactorObservation:
    factor = next(f for f in pol.factors if f.id == factor_id)
    contract = source or pol.source(factor.source)
    ok = not shape_reasons
    if normalized is ...:
        normalized = normalize(contract.normalizer, raw) if ok else None
    return FactorObservation(
        factor_id=factor_id,
        type=factor.type,
        unit=factor.unit,
        source=SourceRef.of(contract),
        raw_value=raw if ok else None,
        normalized_value=normalized,
        normalizer=contract.normalizer,
        measured_at=at,
        shape=ShapeRecord(ok=ok, reason_codes=shape_reasons),
    )


def env(
    pol: EnvironmentPolicy, *observations: FactorObservation, at: str = T0
) -> ExecutionEnvironment:
    return ExecutionEnvironment.build(at, pol.controlled_factors_hash(), observations)


def artifacts(pol: EnvironmentPolicy) -> dict[str, ExecutionEnvironment]:
    def o(factor_id: str, raw: Any, **kw: Any) -> FactorObservation:
        return obs(pol, factor_id, raw, **kw)

    def baseline(**over: FactorObservation | None) -> ExecutionEnvironment:
        base: dict[str, FactorObservation | None] = {
            "logical_cpus": o("logical_cpus", 8),
            "followers": o("followers", 1449),
            "kernel_series": o("kernel_series", "6.6.30-generic"),
            "calibration_seconds": o("calibration_seconds", 0.5),
        }
        base.update(over)
        return env(pol, *(v for v in base.values() if v is not None))

    relabeled, allocated = karma(pol), affinity(pol)
    a = baseline()
    tampered = baseline(logical_cpus=o("logical_cpus", 8))
    tampered_doc = tampered.model_copy(
        update={
            "observations": tuple(
                x.model_copy(update={"raw_value": 16, "normalized_value": 16})
                if x.factor_id == "logical_cpus"
                else x
                for x in tampered.observations
            )
        }
    )
    return {
        "env-a": a,
        # Positive control: same contracts, values inside every tolerance (also overhead-pair).
        "env-b-within": baseline(
            followers=o("followers", 1500),
            kernel_series=o("kernel_series", "6.6.58-generic"),
            calibration_seconds=o("calibration_seconds", 0.55),
        ),
        # Source identity mismatch, values inside tolerance / equal: only the source can indict.
        "env-c-karma-plausible": baseline(
            followers=o("followers", 1500, source=relabeled),
            logical_cpus=o("logical_cpus", 8, source=allocated),
        ),
        # The thread's real row: 299,087 karma read as followers (true count 1,449).
        "env-c-karma-real": baseline(followers=o("followers", 299087, source=relabeled)),
        "env-d-outside": baseline(calibration_seconds=o("calibration_seconds", 1.2)),
        "env-e-missing": baseline(logical_cpus=None),
        "env-f-legacy-kernel": baseline(kernel_series=o("kernel_series", "5.15.0-105-generic")),
        "env-f-unclassified-kernel": baseline(kernel_series=o("kernel_series", "4.19.0")),
        "env-g-overhead": baseline(calibration_seconds=o("calibration_seconds", 0.65)),
        "env-h-shape-failed": baseline(
            followers=o("followers", None, shape_reasons=("body_not_parseable",))
        ),
        "env-i-normalized-wrong": baseline(
            kernel_series=o("kernel_series", "6.6.30-generic", normalized="6.1")
        ),
        "env-j-tampered": tampered_doc,
    }


def case(
    name: str,
    files: list[str],
    decision: str,
    reasons: list[str],
    stages: list[str],
    purpose: str = "cross_subject",
    absent: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "artifacts": files,
        "purpose": purpose if len(files) > 1 else "run",
        "expect": {
            "decision": decision,
            "reason_codes": reasons,
            "stages_run": stages,
            "absent_reason_codes": absent or [],
        },
    }


ALL = ["integrity", "identity", "evidence", "normalization", "run_rules", "match_rules"]
RUN = ALL[:-1]
NO_LATER = [
    "out_of_tolerance",
    "value_mismatch",
    "class_mismatch",
    "normalization_failed",
    "normalization_mismatch",
    "shape_failed",
    "type_mismatch",
]


def cases() -> list[dict[str, Any]]:
    return [
        case("run-conform", ["env-a"], "conform", [], RUN),
        case("positive-control", ["env-a", "env-b-within"], "conform", [], ALL),
        case(
            "positive-control-overhead",
            ["env-a", "env-b-within"],
            "conform",
            [],
            ALL,
            purpose="overhead_pair",
        ),
        case(
            "source-identity-plausible",
            ["env-a", "env-c-karma-plausible"],
            "refused",
            ["source_identity_mismatch"],
            ["integrity", "identity"],
            absent=NO_LATER,
        ),
        case(
            "source-identity-real",
            ["env-a", "env-c-karma-real"],
            "refused",
            ["source_identity_mismatch"],
            ["integrity", "identity"],
            absent=NO_LATER,
        ),
        case(
            "source-identity-run",
            ["env-c-karma-plausible"],
            "refused",
            ["source_identity_mismatch"],
            ["integrity", "identity"],
            absent=NO_LATER,
        ),
        case("outside-tolerance", ["env-a", "env-d-outside"], "refused", ["out_of_tolerance"], ALL),
        case(
            "missing-required",
            ["env-a", "env-e-missing"],
            "refused",
            ["missing_required_factor"],
            ["integrity", "identity"],
        ),
        case(
            "missing-required-run",
            ["env-e-missing"],
            "refused",
            ["missing_required_factor"],
            ["integrity", "identity"],
        ),
        case(
            "class-mismatch-pair",
            ["env-a", "env-f-legacy-kernel"],
            "refused",
            ["class_mismatch"],
            ALL,
        ),
        case(
            "class-mismatch-run",
            ["env-f-unclassified-kernel"],
            "refused",
            ["class_mismatch"],
            RUN,
        ),
        case("overhead-cross-subject", ["env-a", "env-g-overhead"], "conform", [], ALL),
        case(
            "overhead-pair-stricter",
            ["env-a", "env-g-overhead"],
            "refused",
            ["out_of_tolerance"],
            ALL,
            purpose="overhead_pair",
        ),
        case(
            "shape-failed",
            ["env-a", "env-h-shape-failed"],
            "refused",
            ["shape_failed"],
            ["integrity", "identity", "evidence"],
        ),
        case(
            "normalization-mismatch",
            ["env-i-normalized-wrong"],
            "refused",
            ["normalization_mismatch"],
            ["integrity", "identity", "evidence", "normalization"],
        ),
        case(
            "tampered-artifact",
            ["env-a", "env-j-tampered"],
            "refused",
            ["artifact_hash_mismatch"],
            ["integrity"],
        ),
        case(
            "set-of-three",
            ["env-a", "env-b-within", "env-d-outside"],
            "refused",
            ["out_of_tolerance"],
            ALL,
        ),
    ]


def build(root: Path | None = None) -> dict[str, Any]:
    """vectors/environment/: file name -> document."""
    pol = policy(root)
    made = artifacts(pol)
    docs: dict[str, Any] = {f"{k}.json": v.to_json() for k, v in made.items()}
    docs["cases.json"] = {
        "comment": "Known-answer cases for EnvironmentConformanceProof under spec.toml's policy.",
        "controlled_factors_hash": pol.controlled_factors_hash(),
        "execution_environment_hashes": {k: v.execution_environment_hash for k, v in made.items()},
        "cases": cases(),
    }
    return docs


def render(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def files(root: Path) -> dict[str, str]:
    """vectors/environment/: file name -> text (spec.toml is the input, not written)."""
    return {name: render(doc) for name, doc in build(root).items()}
