"""The execution-environment artifact a run records, and the controlled-factor policy it follows.

DESIGN §7. A run's `ExecutionEnvironment` holds, per controlled factor, the raw and normalized
value, a reference to the content-addressed source contract it was read through, the measurement
time and the shape verdict of the read; and its own `execution_environment_hash`. Observed values
never enter the protocol hash: only the rules (factors + source contracts) do, as
`controlled_factors_hash`. Whether artifacts conform is decided in conformance.py.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from runner.evaluator.core.canonical import digest
from runner.evaluator.core.types import Frozen
from runner.evaluator.protocol.spec import Factor, SourceContract

ENVIRONMENT_SCHEMA_VERSION = "afb.environment/1"
DEFAULT_POLICY_PATH = Path(__file__).with_name("default_policy.toml")


# ------------------------------------------------------------------------------ the policy slice


class EnvironmentPolicy(Frozen):
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


class SourceRef(Frozen):
    """A source contract by id and content hash: relabeling another source cannot match it."""

    id: str
    contract_hash: str

    @classmethod
    def of(cls, contract: SourceContract) -> SourceRef:
        return cls(id=contract.id, contract_hash=source_contract_hash(contract))


def source_contract_hash(contract: SourceContract) -> str:
    return digest(contract.model_dump(mode="json"))


class ShapeRecord(Frozen):
    """The shape verdict of the read behind an observation (the value itself is kept apart)."""

    ok: bool
    reason_codes: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    body_sha256: str | None = None
    body_bytes: int = 0


class FactorObservation(Frozen):
    factor_id: str
    type: Literal["integer", "number", "string"]
    unit: str
    source: SourceRef
    raw_value: Any = Field(default=None, description="the parsed value; None when the read failed")
    normalized_value: Any = None
    normalizer: str = Field(description="normalizer name@version that produced normalized_value")
    measured_at: str = Field(description="RFC 3339 UTC time of the read")
    shape: ShapeRecord


class ExecutionEnvironment(Frozen):
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
