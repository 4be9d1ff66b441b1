"""Witness contracts: declarative, per fault kind, hashed into the protocol (files in witnesses/).

A contract names the observations an independent collector must have persisted, and predicates
over them. The runtime only collects; `evaluate_witness` decides. A collector that silently
no-ops yields observations that fail a predicate, so the cell is INVALID_INJECTION, never a pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

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


def evaluate_witness(
    contract: WitnessContract, observations: dict[str, Any], parameters: dict[str, Any]
) -> WitnessVerdict:
    """Observations (by name) + fault parameters -> satisfied, or violated with reason codes."""
    violations: list[str] = []
    for req in sorted(contract.observations, key=lambda o: o.name):
        obs = observations.get(req.name)
        if not isinstance(obs, dict):
            violations.append(f"missing_observation:{req.name}")
        elif obs.get("collector") != req.collector:
            violations.append(f"wrong_collector:{req.name}")
    scope = {**observations, "fault": parameters}
    for p in contract.predicates:
        if p.when is not None and parameters.get(p.when.parameter, _MISSING) != p.when.equals:
            continue
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
