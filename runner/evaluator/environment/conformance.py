"""Environment conformance: one artifact (a run) or several (a pair or set) under the policy.

DESIGN §7. `check_environments` returns an `EnvironmentConformanceProof`. Evaluation is staged and
each stage only runs when every earlier stage passed, so a source-identity mismatch is rejected
before any value is normalized or compared, however plausible each value is:

1. integrity       `artifact_hash_mismatch`
2. identity        `missing_required_factor`, `source_identity_mismatch`, `type_unit_mismatch`
3. evidence        `shape_failed`, `type_mismatch`
4. normalization   `unknown_normalizer`, `normalizer_mismatch`, `normalization_failed`,
                   `normalization_mismatch`
5. run rules       `class_mismatch` (a normalized value in no declared class)
6. match rules     `value_mismatch` (exact), `class_mismatch` (class), `out_of_tolerance`
                   (tolerance; `overhead_pair_tolerance` when the purpose is `overhead_pair`)

A factor with `on_missing_or_drift = "record_only"` never refuses: its findings are listed under
`recorded_codes` and the factor drops out of later stages. A factor with `required = false` may be
absent (recorded as `missing_factor`); when present, its action applies to drift.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import ConfigDict, Field

from runner.evaluator.core.canonical import digest
from runner.evaluator.core.types import Frozen
from runner.evaluator.protocol.spec import Factor, SourceContract, Tolerance

from .artifact import (
    EnvironmentPolicy,
    ExecutionEnvironment,
    FactorObservation,
    SourceRef,
    policy_of,
)
from .normalize import NORMALIZERS, normalize

PROOF_SCHEMA_VERSION = "afb.envproof/1"

Purpose = Literal["run", "cross_subject", "overhead_pair"]
Decision = Literal["conform", "refused"]

ARTIFACT_HASH_MISMATCH = "artifact_hash_mismatch"
MISSING_REQUIRED_FACTOR = "missing_required_factor"
MISSING_FACTOR = "missing_factor"  # an optional (record-only) factor that was not observed
SOURCE_IDENTITY_MISMATCH = "source_identity_mismatch"
TYPE_UNIT_MISMATCH = "type_unit_mismatch"
SHAPE_FAILED = "shape_failed"
TYPE_MISMATCH = "type_mismatch"
UNKNOWN_NORMALIZER = "unknown_normalizer"
NORMALIZER_MISMATCH = "normalizer_mismatch"
NORMALIZATION_FAILED = "normalization_failed"
NORMALIZATION_MISMATCH = "normalization_mismatch"
CLASS_MISMATCH = "class_mismatch"
VALUE_MISMATCH = "value_mismatch"
OUT_OF_TOLERANCE = "out_of_tolerance"

CONFORMANCE_REASON_CODES = (
    ARTIFACT_HASH_MISMATCH,
    MISSING_REQUIRED_FACTOR,
    MISSING_FACTOR,
    SOURCE_IDENTITY_MISMATCH,
    TYPE_UNIT_MISMATCH,
    SHAPE_FAILED,
    TYPE_MISMATCH,
    UNKNOWN_NORMALIZER,
    NORMALIZER_MISMATCH,
    NORMALIZATION_FAILED,
    NORMALIZATION_MISMATCH,
    CLASS_MISMATCH,
    VALUE_MISMATCH,
    OUT_OF_TOLERANCE,
)
STAGES = ("integrity", "identity", "evidence", "normalization", "run_rules", "match_rules")


# ----------------------------------------------------------------------------------------- proof


class FactorFinding(Frozen):
    factor_id: str
    action: Literal["fail_closed", "record_only"]
    stage: str
    reason_code: str
    detail: str


class EnvironmentConformanceProof(Frozen):
    schema_version: Literal["afb.envproof/1"] = Field(default="afb.envproof/1", alias="schema")
    scope: Literal["run", "pair", "set"]
    purpose: Purpose
    decision: Decision
    reason_codes: tuple[str, ...] = Field(description="sorted, unique: why it was refused")
    recorded_codes: tuple[str, ...] = Field(description="record-only drift; never refuses")
    stages_run: tuple[str, ...]
    controlled_factors_hash: str
    execution_environment_hashes: tuple[str, ...]
    factors_checked: tuple[str, ...]
    findings: tuple[FactorFinding, ...]
    proof_hash: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def conform(self) -> bool:
        return self.decision == "conform"

    def computed_hash(self) -> str:
        body = self.model_dump(mode="json", by_alias=True)
        del body["proof_hash"]
        return digest(body)

    def verify(self) -> bool:
        return self.computed_hash() == self.proof_hash

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


_TYPE_CHECK: Mapping[str, Callable[[Any], bool]] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
}


def _within(a: float, b: float, tol: Tolerance) -> tuple[bool, str]:
    """Both declared bounds must hold; relative is to the smaller magnitude (symmetric, strict)."""
    diff = abs(a - b)
    parts = []
    ok = True
    if tol.absolute is not None:
        ok = ok and diff <= tol.absolute
        parts.append(f"|{a} - {b}| = {diff:.6g} vs absolute {tol.absolute}")
    if tol.relative_percent is not None:
        base = min(abs(a), abs(b))
        rel = 0.0 if diff == 0 else (float("inf") if base == 0 else diff / base * 100)
        ok = ok and rel <= tol.relative_percent
        parts.append(f"relative {rel:.4g}% vs {tol.relative_percent}%")
    return ok, "; ".join(parts)


def _class_of(factor: Factor, value: Any) -> str | None:
    for name, members in sorted((factor.classes or {}).items()):
        if isinstance(value, str) and value in members:
            return name
    return None


class _Run:
    """Mutable bookkeeping for one evaluation; frozen into the proof at the end."""

    def __init__(
        self, policy: EnvironmentPolicy, envs: Sequence[ExecutionEnvironment], purpose: Purpose
    ) -> None:
        self.policy = policy
        self.envs = envs
        self.purpose = purpose
        self.labels = [f"#{i}" for i in range(len(envs))]
        self.findings: list[FactorFinding] = []
        self.dropped: set[str] = set()  # record-only factors that left the evaluation
        self.stages: list[str] = []
        self.normalized: dict[str, list[Any]] = {}  # factor id -> recomputed value per artifact

    def find(
        self, factor: Factor, stage: str, code: str, detail: str, *, record_only: bool = False
    ) -> None:
        fail_closed = factor.on_missing_or_drift == "fail_closed" and not record_only
        action: Literal["fail_closed", "record_only"] = (
            "fail_closed" if fail_closed else "record_only"
        )
        self.findings.append(
            FactorFinding(
                factor_id=factor.id, action=action, stage=stage, reason_code=code, detail=detail
            )
        )
        if action == "record_only":
            self.dropped.add(factor.id)

    def blocked(self) -> bool:
        return any(f.action == "fail_closed" for f in self.findings)

    def live(self) -> list[Factor]:
        return [f for f in self.policy.factors if f.id not in self.dropped]

    def observed(self, factor: Factor) -> list[tuple[str, FactorObservation]]:
        """(label, observation) per artifact, for a factor that passed the identity stage."""
        out = []
        for lab, env in zip(self.labels, self.envs, strict=True):
            o = env.observation(factor.id)
            assert o is not None
            out.append((lab, o))
        return out

    def proof(self) -> EnvironmentConformanceProof:
        blocking = sorted({f.reason_code for f in self.findings if f.action == "fail_closed"})
        recorded = sorted({f.reason_code for f in self.findings if f.action == "record_only"})
        findings = sorted(
            self.findings, key=lambda f: (STAGES.index(f.stage), f.factor_id, f.reason_code)
        )
        n = len(self.envs)
        fields: dict[str, Any] = {
            "schema": PROOF_SCHEMA_VERSION,
            "scope": "run" if n == 1 else "pair" if n == 2 else "set",
            "purpose": self.purpose,
            "decision": "refused" if blocking else "conform",
            "reason_codes": blocking,
            "recorded_codes": recorded,
            "stages_run": list(self.stages),
            "controlled_factors_hash": self.policy.controlled_factors_hash(),
            "execution_environment_hashes": [e.execution_environment_hash for e in self.envs],
            "factors_checked": sorted(f.id for f in self.policy.factors),
            "findings": [f.model_dump(mode="json") for f in findings],
        }
        return EnvironmentConformanceProof.model_validate({**fields, "proof_hash": digest(fields)})


# ---------------------------------------------------------------------------------------- stages


def _integrity(run: _Run) -> None:
    """An artifact whose hash does not verify is not evidence of anything."""
    bad = [lab for lab, e in zip(run.labels, run.envs, strict=True) if not e.verify()]
    if bad:
        run.findings.append(
            FactorFinding(
                factor_id="*",
                action="fail_closed",
                stage="integrity",
                reason_code=ARTIFACT_HASH_MISMATCH,
                detail=f"artifact(s) {', '.join(bad)}: execution_environment_hash does not verify",
            )
        )


def _identity(run: _Run) -> None:
    """Presence, then source identity (id + contract hash), then type/unit.

    Nothing is normalized or compared until every factor's source identity holds.
    """
    for factor in run.policy.factors:
        want = SourceRef.of(run.policy.source(factor.source))
        obs = [e.observation(factor.id) for e in run.envs]
        missing = [lab for lab, o in zip(run.labels, obs, strict=True) if o is None]
        if missing:
            # An optional factor may be absent (recorded); a present one still obeys its action.
            code = MISSING_REQUIRED_FACTOR if factor.required else MISSING_FACTOR
            detail = f"not observed in {', '.join(missing)}"
            run.find(factor, "identity", code, detail, record_only=not factor.required)
            continue
        present = [o for o in obs if o is not None]
        wrong = [
            f"{lab} read {o.source.id} ({o.source.contract_hash[:19]}…)"
            for lab, o in zip(run.labels, present, strict=True)
            if o.source != want
        ]
        distinct = {o.source for o in present}
        if wrong or len(distinct) > 1:
            run.find(
                factor,
                "identity",
                SOURCE_IDENTITY_MISMATCH,
                f"policy source {want.id} ({want.contract_hash[:19]}…); " + "; ".join(wrong),
            )
            continue
        off = [
            f"{lab} declares {o.type}/{o.unit}"
            for lab, o in zip(run.labels, present, strict=True)
            if (o.type, o.unit) != (factor.type, factor.unit)
        ]
        if off:
            run.find(
                factor,
                "identity",
                TYPE_UNIT_MISMATCH,
                f"policy says {factor.type}/{factor.unit}; " + "; ".join(off),
            )


def _evidence(run: _Run) -> None:
    """Every read passed its shape check, and its raw value has the declared type."""
    for factor in run.live():
        for lab, o in run.observed(factor):
            if not o.shape.ok:
                why = ", ".join(o.shape.reason_codes) or "no reason recorded"
                run.find(factor, "evidence", SHAPE_FAILED, f"{lab}: read failed its shape ({why})")
                break
            if not _TYPE_CHECK[factor.type](o.raw_value):
                run.find(
                    factor,
                    "evidence",
                    TYPE_MISMATCH,
                    f"{lab}: raw {o.raw_value!r} not {factor.type}",
                )
                break


def _normalization(run: _Run) -> None:
    """Recompute from the raw value with the contract's versioned normalizer."""
    for factor in run.live():
        contract = run.policy.source(factor.source)
        name = contract.normalizer.split("@", 1)[0]
        if name != factor.normalization:
            run.find(
                factor,
                "normalization",
                NORMALIZER_MISMATCH,
                f"factor says {factor.normalization}, source contract says {contract.normalizer}",
            )
            continue
        if contract.normalizer not in NORMALIZERS:
            run.find(
                factor,
                "normalization",
                UNKNOWN_NORMALIZER,
                f"{contract.normalizer}; known: {', '.join(sorted(NORMALIZERS))}",
            )
            continue
        values: list[Any] = []
        for lab, o in run.observed(factor):
            try:
                v = normalize(contract.normalizer, o.raw_value)
            except (ValueError, TypeError) as exc:
                run.find(factor, "normalization", NORMALIZATION_FAILED, f"{lab}: {exc}")
                break
            if o.normalizer != contract.normalizer or o.normalized_value != v:
                run.find(
                    factor,
                    "normalization",
                    NORMALIZATION_MISMATCH,
                    f"{lab}: recorded {o.normalized_value!r} by {o.normalizer}, "
                    f"recomputed {v!r} by {contract.normalizer}",
                )
                break
            values.append(v)
        else:
            run.normalized[factor.id] = values


def _run_rules(run: _Run) -> None:
    """A class-matched factor's value must belong to a declared class."""
    for factor in run.live():
        if factor.match != "class" or factor.id not in run.normalized:
            continue
        for lab, v in zip(run.labels, run.normalized[factor.id], strict=True):
            if _class_of(factor, v) is None:
                run.find(
                    factor,
                    "run_rules",
                    CLASS_MISMATCH,
                    f"{lab}: {v!r} is in no declared class {sorted(factor.classes or {})}",
                )
                break


def _match_rules(run: _Run) -> None:
    """Across the pair/set: every pair of artifacts must match, by the factor's match rule."""
    for factor in run.live():
        if factor.id not in run.normalized:
            continue
        vals = run.normalized[factor.id]
        for (i, a), (j, b) in itertools.combinations(enumerate(vals), 2):
            problem = _mismatch(run.purpose, factor, a, b)
            if problem is not None:
                code, why = problem
                run.find(factor, "match_rules", code, f"{run.labels[i]} vs {run.labels[j]}{why}")
                break


def _mismatch(purpose: Purpose, factor: Factor, a: Any, b: Any) -> tuple[str, str] | None:
    """(reason code, detail after the pair's labels) when a and b do not match, else None."""
    if factor.match == "exact":
        return None if a == b else (VALUE_MISMATCH, f": {a!r} != {b!r}")
    if factor.match == "class":
        ca, cb = _class_of(factor, a), _class_of(factor, b)
        if ca == cb:
            return None
        return CLASS_MISMATCH, f": {a!r} ({ca}) and {b!r} ({cb}) are in different classes"
    overhead = purpose == "overhead_pair" and factor.overhead_pair_tolerance is not None
    tol = factor.overhead_pair_tolerance if overhead else factor.tolerance
    assert tol is not None
    if not (_TYPE_CHECK["number"](a) and _TYPE_CHECK["number"](b)):
        return TYPE_MISMATCH, ": not numbers"
    ok, why = _within(float(a), float(b), tol)
    if ok:
        return None
    return OUT_OF_TOLERANCE, f" ({'overhead-pair' if overhead else 'cross-subject'}): {why}"


_STAGE_CHECKS: tuple[Callable[[_Run], None], ...] = (
    _integrity,
    _identity,
    _evidence,
    _normalization,
    _run_rules,
    _match_rules,
)


# ----------------------------------------------------------------------------------------- entry


def check_environments(
    envs: Sequence[ExecutionEnvironment],
    factors: Iterable[Factor],
    sources: Iterable[SourceContract],
    purpose: Purpose = "cross_subject",
) -> EnvironmentConformanceProof:
    """One artifact (purpose "run") or a pair/set under the match rules → a conformance proof.

    Pure and deterministic: the same artifacts and rules always give the same proof bytes.
    """
    if not envs:
        raise ValueError("at least one execution-environment artifact is needed")
    policy = policy_of(factors, sources)
    if len(envs) == 1:
        purpose = "run"
    elif purpose == "run":
        raise ValueError("purpose 'run' takes exactly one artifact")
    run = _Run(policy, envs, purpose)
    for stage, check in zip(STAGES, _STAGE_CHECKS, strict=True):
        if stage == "match_rules" and len(envs) == 1:
            break  # one artifact has nothing to match against
        run.stages.append(stage)
        check(run)
        if run.blocked():
            break
    return run.proof()


def check_run(
    env: ExecutionEnvironment, factors: Iterable[Factor], sources: Iterable[SourceContract]
) -> EnvironmentConformanceProof:
    """One run under the policy: every required factor present, read intact, value admissible."""
    return check_environments([env], factors, sources, purpose="run")


def check_pair(
    a: ExecutionEnvironment,
    b: ExecutionEnvironment,
    factors: Iterable[Factor],
    sources: Iterable[SourceContract],
    purpose: Purpose = "cross_subject",
) -> EnvironmentConformanceProof:
    """Two runs under the match rules (`overhead_pair` applies the stricter tolerance)."""
    return check_environments([a, b], factors, sources, purpose=purpose)
