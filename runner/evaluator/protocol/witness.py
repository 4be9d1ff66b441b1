"""Witness contracts: declarative, per fault kind, hashed into the protocol (files in witnesses/).

A contract names the observations an independent collector must have persisted, and predicates
over them. The runtime collects and, before it releases or recovers, runs `evaluate_witness`
itself on what it persisted (`until="after_injection"`); the evaluator runs it again on the
journal and decides. A collector that silently
no-ops yields observations that fail a predicate, so the cell is INVALID_INJECTION, never a pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from runner.evaluator.core.canonical import digest, parse_json
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import Frozen

from .faultkinds import NO_FAULT, FaultKind, injected_kinds, kind_def

WITNESS_SCHEMA_VERSION = "afb.witness/1"
_MISSING = object()


class PathOperand(Frozen):
    """A path into the observations (`name.field.sub`)."""

    path: str


class ConstOperand(Frozen):
    """A constant (which may be null)."""

    const: Any


Operand = PathOperand | ConstOperand


class Condition(Frozen):
    """Apply a predicate only when a fault parameter has this value."""

    parameter: str
    equals: Any


class Predicate(Frozen):
    id: str = Field(pattern=r"^[a-z0-9_]+$", description="also the reason code when violated")
    op: Literal["eq", "ne", "gt", "ge", "lt", "le", "present", "nonempty"]
    left: str = Field(description="path into the observations")
    right: Operand | None = None
    when: Condition | None = None
    meaning: str = ""

    @model_validator(mode="after")
    def _arity(self) -> Predicate:
        unary = self.op in ("present", "nonempty")
        if unary != (self.right is None):
            raise ValueError(f"op {self.op!r} {'takes no' if unary else 'needs a'} right operand")
        return self


class ObservationRequirement(Frozen):
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    collector: str = Field(description="the independent observer that must write it")
    phase: Literal["before_injection", "after_injection", "after_release"]
    description: str = ""
    alternative_collectors: list[str] = Field(
        default_factory=list,
        description="other collectors that may write it instead (e.g. the call record of "
        "whichever interposer carried the triggering call); the engine, not the plugin, says which",
    )
    independent_of_actuator: bool = Field(
        default=False,
        description="the collector's runtime component (stamped by the engine as "
        "`observation.component`) must differ from the actuator's (the receipt's `component`)",
    )

    @property
    def collectors(self) -> frozenset[str]:
        return frozenset([self.collector, *self.alternative_collectors])

    @model_serializer(mode="wrap")
    def _v1_shape_when_unused(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Fields added in v2 are left out at their defaults, so a contract that does not use
        # them keeps its v1 bytes and hash (run protocols written before them stay canonical).
        body: dict[str, Any] = handler(self)
        for key in ("alternative_collectors", "independent_of_actuator"):
            if not body.get(key):
                body.pop(key, None)
        return body


class WitnessContract(Frozen):
    schema_version: Literal["afb.witness/1"] = Field(alias="schema")
    kind: FaultKind
    version: str
    description: str
    observations: list[ObservationRequirement] = Field(min_length=1, description="set, by name")
    predicates: list[Predicate] = Field(min_length=1, description="sequence: evaluated in order")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _paths_resolve(self) -> WitnessContract:
        names = {o.name for o in self.observations}
        if len(names) != len(self.observations):
            raise ValueError("duplicate observation name")
        ids = [p.id for p in self.predicates]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate predicate id")
        for p in self.predicates:
            for path in (p.left, p.right.path if isinstance(p.right, PathOperand) else None):
                if path is not None and path.split(".")[0] not in names | {"fault"}:
                    raise ValueError(f"predicate {p.id}: {path!r} names no declared observation")
        return self


class WitnessVerdict(Frozen):
    kind: FaultKind
    satisfied: bool
    violations: list[str]  # reason codes, in predicate order; empty when satisfied


def _lookup(observations: dict[str, Any], path: str) -> Any:
    node: Any = observations
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "eq":
        return bool(left == right and type(left) is type(right))
    if op == "ne":
        return bool(left != right)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)):
        return False  # ordering a non-number is a contradiction, never a pass
    return bool(
        {"gt": left > right, "ge": left >= right, "lt": left < right, "le": left <= right}[op]
    )


_PHASES = ("before_injection", "after_injection", "after_release")


def evaluate_witness(
    contract: WitnessContract,
    observations: dict[str, Any],
    parameters: dict[str, Any],
    *,
    actuator_component: str | None = None,
    until: Literal["before_injection", "after_injection", "after_release"] = "after_release",
) -> WitnessVerdict:
    """Observations (by name) + fault parameters -> satisfied, or violated with reason codes.

    `actuator_component` is the receipt's `component`: an observation whose contract requires
    independence must name another, non-empty component (None: not judged -- a caller holding
    observations without their receipt). `until` judges only the observations due by that
    phase and the predicates over them alone: the runtime runs this with
    `until="after_injection"` before it releases or recovers (after-release observations cannot
    exist yet); the evaluator judges the whole contract.
    """
    due = {o.name for o in contract.observations if _PHASES.index(o.phase) <= _PHASES.index(until)}
    violations: list[str] = []
    for req in sorted(contract.observations, key=lambda o: o.name):
        if req.name not in due:
            continue
        obs = observations.get(req.name)
        if not isinstance(obs, dict):
            violations.append(f"missing_observation:{req.name}")
            continue
        if obs.get("collector") not in req.collectors:
            violations.append(f"wrong_collector:{req.name}")
        component = obs.get("component")
        if (
            req.independent_of_actuator
            and actuator_component is not None
            and (not isinstance(component, str) or component in ("", actuator_component))
        ):
            violations.append(f"collector_not_independent:{req.name}")
    scope = {**observations, "fault": parameters}
    for p in contract.predicates:
        if p.when is not None and parameters.get(p.when.parameter, _MISSING) != p.when.equals:
            continue
        if not _names(p) <= due | {"fault"}:
            continue  # judged later, once its observations are due
        left = _lookup(scope, p.left)
        if p.op == "present":
            ok = left is not _MISSING and left is not None
        elif p.op == "nonempty":
            ok = isinstance(left, str | list | dict) and len(left) > 0
        else:
            assert p.right is not None
            right = (
                _lookup(scope, p.right.path) if isinstance(p.right, PathOperand) else p.right.const
            )
            ok = left is not _MISSING and right is not _MISSING and _compare(p.op, left, right)
        if not ok:
            violations.append(p.id)
    return WitnessVerdict(kind=contract.kind, satisfied=not violations, violations=violations)


def _names(p: Predicate) -> set[str]:
    paths = [p.left, p.right.path if isinstance(p.right, PathOperand) else None]
    return {path.split(".")[0] for path in paths if path is not None}


def load_contracts(directory: Path) -> dict[FaultKind, WitnessContract]:
    """One contract per registered fault kind; a missing, second or unknown kind is an error.

    Contracts are `directory/*.json`, plus the file a kind registered with an explicit contract
    path names (a kind registered outside the checkout: see `faultkinds.register_fault_kind`).
    """
    paths = sorted(directory.glob("*.json"))
    paths += [d.contract for k in injected_kinds() if (d := kind_def(k)).contract is not None]
    out: dict[FaultKind, WitnessContract] = {}
    for path in paths:
        try:
            contract = WitnessContract.model_validate(parse_json(path.read_bytes()))
        except (OSError, ValueError, ValidationError) as exc:
            raise InputError(f"invalid witness contract: {exc}", file=str(path)) from exc
        if contract.kind in out or contract.kind == NO_FAULT:
            raise InputError(f"second or invalid contract for {contract.kind}", file=str(path))
        out[contract.kind] = contract
    missing = [k for k in injected_kinds() if k not in out]
    if missing:
        raise InputError(f"no witness contract for {missing}", file=str(directory))
    return out


def contracts_hash(contracts: dict[FaultKind, WitnessContract]) -> str:
    return digest(
        {
            "schema": "afb.witness-set/1",
            "contracts": {k: _hashable(c) for k, c in sorted(contracts.items())},
        }
    )


def _hashable(contract: WitnessContract) -> dict[str, Any]:
    body = contract.model_dump(mode="json", by_alias=True)
    body["observations"] = sorted(body["observations"], key=lambda o: o["name"])  # a set
    return body
