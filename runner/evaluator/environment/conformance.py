"""Controlled environment factors: the execution-environment artifact and its conformance proof.

DESIGN §7. A run's `ExecutionEnvironment` holds, per controlled factor, the raw and normalized
value, a reference to the content-addressed source contract it was read through, the measurement
time and the shape verdict of the read; and its own `execution_environment_hash`. Observed values
never enter the protocol hash: only the rules (factors + source contracts) do, as
`controlled_factors_hash`.

`check_environments` evaluates one artifact (a run) or several (a pair or set) under the policy and
returns an `EnvironmentConformanceProof`. Evaluation is staged and each stage only runs when every
earlier stage passed, so a source-identity mismatch is rejected before any value is normalized or
compared, however plausible each value is:

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
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runner.evaluator.core.canonical import digest
from runner.evaluator.protocol.spec import Factor, SourceContract, Tolerance

ENVIRONMENT_SCHEMA_VERSION = "afb.environment/1"
PROOF_SCHEMA_VERSION = "afb.envproof/1"
DEFAULT_POLICY_PATH = Path(__file__).with_name("default_policy.toml")

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


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------------- normalizers


def _identity(v: Any) -> Any:
    return v


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not text")
    return v


def _lower(v: Any) -> Any:
    return _text(v).strip().lower()


def _strip(v: Any) -> Any:
    return _text(v).strip()


_VERSION = re.compile(r"(\d+)(?:\.(\d+))?")


def _major_minor(v: Any) -> Any:
    m = _VERSION.search(_text(v))
    if not m or m.group(2) is None:
        raise ValueError(f"no major.minor version in {v!r}")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def _major(v: Any) -> Any:
    m = _VERSION.search(_text(v))
    if not m:
        raise ValueError(f"no version number in {v!r}")
    return str(int(m.group(1)))


def _mib(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a byte count")
    return v // (1024 * 1024)


def _gib(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a byte count")
    return round(v / 1024**3)


NORMALIZERS: Mapping[str, Callable[[Any], Any]] = {
    "identity@1": _identity,
    "lower@1": _lower,
    "strip@1": _strip,
    "major_minor@1": _major_minor,
    "major@1": _major,
    "mib@1": _mib,
    "gib@1": _gib,
}


def normalize(normalizer: str, raw: Any) -> Any:
    """Apply a normalizer by `name@version`; KeyError if unknown, ValueError if it rejects `raw`."""
    return NORMALIZERS[normalizer](raw)


# ------------------------------------------------------------------------------ the policy slice


class EnvironmentPolicy(_Frozen):
    """The controlled-factor rules: a spec's `[[factors]]` and `[[sources]]`, or the default."""

    factors: tuple[Factor, ...]
    sources: tuple[SourceContract, ...]

    @model_validator(mode="after")
    def _refs(self) -> EnvironmentPolicy:
        ids = [s.id for s in self.sources]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate source id")
        fids = [f.id for f in self.factors]
        if len(set(fids)) != len(fids):
            raise ValueError("duplicate factor id")
        for f in self.factors:
            if f.source not in ids:
                raise ValueError(f"factor {f.id}: unknown source {f.source!r}")
        return self

    def source(self, source_id: str) -> SourceContract:
        for s in self.sources:
            if s.id == source_id:
                return s
        raise KeyError(source_id)

    def body(self) -> dict[str, Any]:
        """Same body as `identities.controlled_factors_body` (so the hashes agree)."""
        return {
            "factors": sorted(
                (f.model_dump(mode="json") for f in self.factors), key=lambda f: f["id"]
            ),
            "sources": sorted(
                (s.model_dump(mode="json") for s in self.sources), key=lambda s: s["id"]
            ),
        }

    def controlled_factors_hash(self) -> str:
        return digest(self.body())


def policy_of(factors: Iterable[Factor], sources: Iterable[SourceContract]) -> EnvironmentPolicy:
    return EnvironmentPolicy(factors=tuple(factors), sources=tuple(sources))


def load_default_policy(path: Path | None = None) -> EnvironmentPolicy:
    """The documented default policy (default_policy.toml beside this module), used without spec."""
    raw = tomllib.loads((path or DEFAULT_POLICY_PATH).read_text(encoding="utf-8"))
    return EnvironmentPolicy.model_validate(
        {"factors": raw.get("factors", []), "sources": raw.get("sources", [])}
    )


# ------------------------------------------------------------------------------------- artifact


class SourceRef(_Frozen):
    """A source contract by id and content hash: relabeling another source cannot match it."""

    id: str
    contract_hash: str

    @classmethod
    def of(cls, contract: SourceContract) -> SourceRef:
        return cls(id=contract.id, contract_hash=source_contract_hash(contract))


def source_contract_hash(contract: SourceContract) -> str:
    return digest(contract.model_dump(mode="json"))


class ShapeRecord(_Frozen):
    """The shape verdict of the read behind an observation (the value itself is kept apart)."""

    ok: bool
    reason_codes: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    body_sha256: str | None = None
    body_bytes: int = 0


class FactorObservation(_Frozen):
    factor_id: str
    type: Literal["integer", "number", "string"]
    unit: str
    source: SourceRef
    raw_value: Any = Field(default=None, description="the parsed value; None when the read failed")
    normalized_value: Any = None
    normalizer: str = Field(description="normalizer name@version that produced normalized_value")
    measured_at: str = Field(description="RFC 3339 UTC time of the read")
    shape: ShapeRecord


class ExecutionEnvironment(_Frozen):
    schema_version: Literal["afb.environment/1"] = Field(
        default="afb.environment/1", alias="schema"
    )
    measured_at: str
    observed_under: str = Field(
        description="controlled_factors_hash of the policy the collector followed"
    )
    observations: tuple[FactorObservation, ...]
    execution_environment_hash: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _unique(self) -> ExecutionEnvironment:
        ids = [o.factor_id for o in self.observations]
        if len(set(ids)) != len(ids):
            raise ValueError("an artifact observes each factor at most once")
        return self

    @staticmethod
    def _body(
        measured_at: str, observed_under: str, observations: Sequence[FactorObservation]
    ) -> dict[str, Any]:
        return {
            "schema": ENVIRONMENT_SCHEMA_VERSION,
            "measured_at": measured_at,
            "observed_under": observed_under,
            "observations": [
                o.model_dump(mode="json") for o in sorted(observations, key=lambda o: o.factor_id)
            ],
        }

    @classmethod
    def build(
        cls, measured_at: str, observed_under: str, observations: Iterable[FactorObservation]
    ) -> ExecutionEnvironment:
        obs = tuple(sorted(observations, key=lambda o: o.factor_id))
        return cls(
            measured_at=measured_at,
            observed_under=observed_under,
            observations=obs,
            execution_environment_hash=digest(cls._body(measured_at, observed_under, obs)),
        )

    def computed_hash(self) -> str:
        return digest(self._body(self.measured_at, self.observed_under, self.observations))

    def verify(self) -> bool:
        return self.computed_hash() == self.execution_environment_hash

    def observation(self, factor_id: str) -> FactorObservation | None:
        for o in self.observations:
            if o.factor_id == factor_id:
                return o
        return None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def load_environment(obj: Any) -> ExecutionEnvironment:
    """Validate a parsed artifact (ValueError if malformed); the proof checks its hash."""
    return ExecutionEnvironment.model_validate(obj)


# ----------------------------------------------------------------------------------------- proof


class FactorFinding(_Frozen):
    factor_id: str
    action: Literal["fail_closed", "record_only"]
    stage: str
    reason_code: str
    detail: str


class EnvironmentConformanceProof(_Frozen):
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

    def __init__(self, policy: EnvironmentPolicy) -> None:
        self.policy = policy
        self.findings: list[FactorFinding] = []
        self.dropped: set[str] = set()  # record-only factors that left the evaluation
        self.stages: list[str] = []

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
    run = _Run(policy)
    labels = [f"#{i}" for i in range(len(envs))]

    def finish() -> EnvironmentConformanceProof:
        blocking = sorted({f.reason_code for f in run.findings if f.action == "fail_closed"})
        recorded = sorted({f.reason_code for f in run.findings if f.action == "record_only"})
        findings = sorted(
            run.findings, key=lambda f: (STAGES.index(f.stage), f.factor_id, f.reason_code)
        )
        fields: dict[str, Any] = {
            "schema": PROOF_SCHEMA_VERSION,
            "scope": "run" if len(envs) == 1 else "pair" if len(envs) == 2 else "set",
            "purpose": purpose,
            "decision": "refused" if blocking else "conform",
            "reason_codes": blocking,
            "recorded_codes": recorded,
            "stages_run": list(run.stages),
            "controlled_factors_hash": policy.controlled_factors_hash(),
            "execution_environment_hashes": [e.execution_environment_hash for e in envs],
            "factors_checked": sorted(f.id for f in policy.factors),
            "findings": [f.model_dump(mode="json") for f in findings],
        }
        return EnvironmentConformanceProof.model_validate({**fields, "proof_hash": digest(fields)})

    # 1. integrity: an artifact whose hash does not verify is not evidence of anything.
    run.stages.append("integrity")
    bad = [lab for lab, e in zip(labels, envs, strict=True) if not e.verify()]
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
        return finish()

    # 2. identity: presence, then source identity (id + contract hash), then type/unit.
    #    Nothing is normalized or compared until every factor's source identity holds.
    run.stages.append("identity")
    for factor in policy.factors:
        want = SourceRef.of(policy.source(factor.source))
        obs = [e.observation(factor.id) for e in envs]
        missing = [lab for lab, o in zip(labels, obs, strict=True) if o is None]
        if missing:
            # An optional factor may be absent (recorded); a present one still obeys its action.
            code = MISSING_REQUIRED_FACTOR if factor.required else MISSING_FACTOR
            detail = f"not observed in {', '.join(missing)}"
            run.find(factor, "identity", code, detail, record_only=not factor.required)
            continue
        present = [o for o in obs if o is not None]
        wrong = [
            f"{lab} read {o.source.id} ({o.source.contract_hash[:19]}…)"
            for lab, o in zip(labels, present, strict=True)
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
            for lab, o in zip(labels, present, strict=True)
            if (o.type, o.unit) != (factor.type, factor.unit)
        ]
        if off:
            run.find(
                factor,
                "identity",
                TYPE_UNIT_MISMATCH,
                f"policy says {factor.type}/{factor.unit}; " + "; ".join(off),
            )
    if run.blocked():
        return finish()

    # 3. evidence: every read passed its shape check, and its raw value has the declared type.
    run.stages.append("evidence")
    for factor in run.live():
        for lab, env in zip(labels, envs, strict=True):
            o = env.observation(factor.id)
            assert o is not None
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
    if run.blocked():
        return finish()

    # 4. normalization: recompute from the raw value with the contract's versioned normalizer.
    run.stages.append("normalization")
    normalized: dict[str, list[Any]] = {}
    for factor in run.live():
        contract = policy.source(factor.source)
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
        for lab, env in zip(labels, envs, strict=True):
            o = env.observation(factor.id)
            assert o is not None
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
            normalized[factor.id] = values
    if run.blocked():
        return finish()

    # 5. run rules: a class-matched factor's value must belong to a declared class.
    run.stages.append("run_rules")
    for factor in run.live():
        if factor.match != "class" or factor.id not in normalized:
            continue
        for lab, v in zip(labels, normalized[factor.id], strict=True):
            if _class_of(factor, v) is None:
                run.find(
                    factor,
                    "run_rules",
                    CLASS_MISMATCH,
                    f"{lab}: {v!r} is in no declared class {sorted(factor.classes or {})}",
                )
                break
    if run.blocked() or len(envs) == 1:
        return finish()

    # 6. match rules across the pair/set: every pair must match.
    run.stages.append("match_rules")
    for factor in run.live():
        if factor.id not in normalized:
            continue
        vals = normalized[factor.id]
        for (i, a), (j, b) in itertools.combinations(enumerate(vals), 2):
            pair = f"{labels[i]} vs {labels[j]}"
            if factor.match == "exact":
                if a != b:
                    run.find(factor, "match_rules", VALUE_MISMATCH, f"{pair}: {a!r} != {b!r}")
                    break
            elif factor.match == "class":
                ca, cb = _class_of(factor, a), _class_of(factor, b)
                if ca != cb:
                    run.find(
                        factor,
                        "match_rules",
                        CLASS_MISMATCH,
                        f"{pair}: {a!r} ({ca}) and {b!r} ({cb}) are in different classes",
                    )
                    break
            else:
                tol = factor.tolerance
                if purpose == "overhead_pair" and factor.overhead_pair_tolerance is not None:
                    tol = factor.overhead_pair_tolerance
                assert tol is not None
                if not (_TYPE_CHECK["number"](a) and _TYPE_CHECK["number"](b)):
                    run.find(factor, "match_rules", TYPE_MISMATCH, f"{pair}: not numbers")
                    break
                ok, why = _within(float(a), float(b), tol)
                if not ok:
                    which = (
                        "overhead-pair"
                        if purpose == "overhead_pair" and factor.overhead_pair_tolerance
                        else "cross-subject"
                    )
                    run.find(factor, "match_rules", OUT_OF_TOLERANCE, f"{pair} ({which}): {why}")
                    break
    return finish()


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
