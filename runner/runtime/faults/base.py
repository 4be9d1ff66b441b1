"""The fault plugin interface: one class per fault kind, driven by the trigger engine.

How one attempt is wired (see `runner.runtime.attempt.triggers.TriggerEngine`):

    engine = TriggerEngine(journal, cell_id=..., attempt=1)
    engine.schedule(fault_id, kind, trigger, plugin, parameters)  # lifecycle `scheduled`
    engine.arm()                       # plugin.arm(ctx); lifecycle `armed`
    ... interposers call engine.event(source, tool, phase, call_id, context) for every call ...
    engine.finish()                    # pending witnesses, after-release observations, counts

When an event matches a fault's trigger (tool or "*", ordinal, phase) the engine, while the
triggering call is held in flight in the interposer's thread:

    1. writes `TriggerReached`;
    2. collects the plugin's BEFORE_INJECTION observations (e.g. identity before a restart);
    3. calls `plugin.inject(ctx)` -> `Injection`; writes `ActuatorReceipt`, lifecycle `injected`;
    4. collects AFTER_INJECTION observations -- immediately, or, when the plugin sets
       `witness_after_directive = True`, once the interposer has applied the returned directive
       and called `Decision.complete()` (lost_response: the zero bytes must really have been
       delivered before the proxy's counts mean anything);
    5. writes each `WitnessObservation` (each fsync'd), and only then lifecycle `witnessed`;
    6. calls `plugin.release(ctx)` or `plugin.recover(ctx)` (per `settles_by`) and writes
       lifecycle `released` / `recovered`. Recovery therefore never precedes a durable witness;
    7. AFTER_RELEASE observations (e.g. the subject reattached) are collected by
       `engine.finish()` at the end of the attempt.

Before step 6 the engine runs the evaluator's own witness check (`evaluate_witness`, up to the
after-injection observations) on what it persisted. If it fails, or the deferred witness does
not complete within `witness_timeout`, the engine writes lifecycle `rejected` instead of
`witnessed`, never recovers (a `release` still runs, so that nothing stays held) and asks the
attempt to stop (`on_reject`): the attempt is INVALID_INJECTION, retried under the policy.

The plugin never writes to the journal itself: it returns typed values and the engine enforces
the order above. The engine also checks a plugin against itself (`validate_plugin`) and against
its witness contract (`check_against_contract`): every declared observation name, collector set
and stage must match the contract exactly, and a collector the contract requires to be
independent of the actuator must read another component than `actuator_component`.

Writing a new kind: subclass `FaultPlugin[Params]` (`Params`: the kind's parameter model, as
registered with the evaluator), set the class attributes, implement `build` (the plugin from an
attempt's `AttemptResources` and its typed parameters, `resources.py`), `inject` and
`collect_witness`, optionally `check_subject` (parameters that cannot fit a subject's limits,
refused before any cell runs), and register it in the kind's own module (`registry.py`).
Collectors must be independent of the actuator (read the runtime's own state: the proxy's
byte counts, the reaper's wait status, the container runtime's inspect), and must return an
observation even when they saw nothing -- with the fields that show it -- so that a silent
no-op fails the contract instead of going missing. Collectors are named from the registry in
`collectors.py`; the engine stamps `collector` and `component` into each persisted
observation (a plugin-written label that differs is a harness error).

`plugin.noop()` returns the negative-conformance variant: its actuator does nothing but still
reports `applied: true`; its collectors are the real ones, so the evaluator must reject it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, Literal, NamedTuple, Self, TypeVar

from pydantic import BaseModel

import runner.runtime.faults.collectors as C
from runner.evaluator.protocol.faultkinds import FaultKind, injected_kinds
from runner.evaluator.protocol.spec import Trigger
from runner.evaluator.protocol.witness import WitnessContract
from runner.runtime.events import CallEvent, Directive
from runner.runtime.faults.resources import AttemptResources, SubjectLimits


class WitnessStage(StrEnum):
    """When a collector runs; same words as the contract's observation `phase`."""

    BEFORE_INJECTION = "before_injection"
    AFTER_INJECTION = "after_injection"
    AFTER_RELEASE = "after_release"


@dataclass(frozen=True)
class FaultContext:
    """What a plugin knows about its fault; `event` is None only in `arm`. Its parameters it
    was built with (`FaultPlugin.build`), typed."""

    fault_id: str
    kind: FaultKind
    trigger: Trigger
    event: CallEvent | None = None

    def require_event(self) -> CallEvent:
        if self.event is None:
            raise PluginContractError(f"{self.fault_id}: no triggering event in this context")
        return self.event


@dataclass(frozen=True)
class Injection:
    """The actuator's own account (becomes the ActuatorReceipt): never proof by itself."""

    applied: bool
    directive: Directive = Directive.CONTINUE
    detail: Mapping[str, Any] = field(default_factory=dict)


class Observed(NamedTuple):
    collector: str  # a registered collector, or collectors.TRIGGERING_INTERPOSER
    stage: WitnessStage


Observations = dict[str, dict[str, Any]]


class PluginContractError(RuntimeError):
    """A plugin that does not match its declaration or its witness contract."""


P = TypeVar("P", bound=BaseModel)


class FaultPlugin(ABC, Generic[P]):
    """One fault kind: actuator + independent witness collectors. See the module docstring.

    `P` is the kind's parameter model (`runner.evaluator.protocol.faultkinds`): the plugin gets
    it, validated and defaulted, from `build` -- never the spec's dict.
    """

    kind: ClassVar[FaultKind]
    actuator: ClassVar[str]  # name recorded in the receipt, e.g. "egress_proxy.drop_response"
    actuator_component: ClassVar[str]  # the runtime component it acts through (receipt)
    observations: ClassVar[Mapping[str, Observed]]  # contract name -> (collector, stage)
    witness_after_directive: ClassVar[bool] = False
    settles_by: ClassVar[Literal["release", "recover"]] = "release"
    variant: str = "real"

    @classmethod
    def build(cls, resources: AttemptResources, params: P) -> Self:
        """This kind's plugin for one attempt: what it needs, taken from `resources`.

        Every registered kind overrides this (`registry.register` refuses one that does not);
        the attempt calls it and never names a kind."""
        raise PluginContractError(f"{cls.__name__} does not say how to build itself (build)")

    @classmethod
    def check_subject(cls, params: P, limits: SubjectLimits) -> tuple[str, str] | None:
        """Why this fault cannot run against a subject with these limits, as (parameter, why);
        None when it can. Checked for every fault and subject before any cell runs (exit 2)."""
        return None

    def arm(self, ctx: FaultContext) -> None:
        """Prepare before the subject starts (e.g. open a collector); must not disturb anything."""
        return None  # optional hook

    @abstractmethod
    def inject(self, ctx: FaultContext) -> Injection:
        """Run the actuator while the triggering call is held; return what was attempted."""

    @abstractmethod
    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        """Return every observation declared for `stage`, each with its `collector` field."""

    def release(self, ctx: FaultContext) -> None:
        """Undo the disturbance (e.g. drop a partition rule); called after `witnessed`."""
        return None  # optional hook

    def recover(self, ctx: FaultContext) -> None:
        """Harness-side recovery (e.g. relaunch the subject); called after `witnessed`."""
        return None  # optional hook

    def noop(self) -> FaultPlugin[Any]:
        return NoopActuator(self)

    def stage_names(self, stage: WitnessStage) -> list[str]:
        return sorted(n for n, o in self.observations.items() if o.stage is stage)


class NoopActuator(FaultPlugin[Any]):
    """Negative conformance: the actuator does nothing yet reports `applied: true`.

    Collectors are the wrapped plugin's real ones, so the witness contract must fail. Release
    and recovery are skipped: nothing was disturbed, and e.g. relaunching a subject that was
    never killed would run two of it.
    """

    variant = "noop"

    def __init__(self, real: FaultPlugin[Any]) -> None:
        self.real = real
        # Instance attributes shadow the ClassVars so the engine sees the real declaration.
        self.kind = real.kind  # type: ignore[misc]
        self.actuator = real.actuator  # type: ignore[misc]
        self.actuator_component = real.actuator_component  # type: ignore[misc]
        self.observations = real.observations  # type: ignore[misc]
        self.witness_after_directive = real.witness_after_directive  # type: ignore[misc]
        self.settles_by = real.settles_by  # type: ignore[misc]

    def arm(self, ctx: FaultContext) -> None:
        self.real.arm(ctx)

    def inject(self, ctx: FaultContext) -> Injection:
        return Injection(applied=True, directive=Directive.CONTINUE, detail={"variant": "noop"})

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        return self.real.collect_witness(ctx, stage)

    def noop(self) -> FaultPlugin[Any]:
        return self


def validate_plugin(plugin: FaultPlugin[Any]) -> None:
    """The plugin's declaration is complete and well-typed (checked when it is scheduled)."""
    name = type(plugin).__name__
    for attr in ("kind", "actuator", "actuator_component", "observations"):
        if not hasattr(plugin, attr):
            raise PluginContractError(f"{name}: missing class attribute {attr!r}")
    if not isinstance(plugin.kind, str) or plugin.kind not in injected_kinds():
        raise PluginContractError(f"{name}: kind must be a registered fault kind")
    if not plugin.actuator or not plugin.actuator_component:
        raise PluginContractError(f"{name}: empty actuator name or component")
    if not plugin.observations:
        raise PluginContractError(f"{name}: declares no observations")
    for obs_name, obs in plugin.observations.items():
        if not isinstance(obs, Observed) or not isinstance(obs.stage, WitnessStage):
            raise PluginContractError(f"{name}: observation {obs_name!r} is not an Observed")
        unknown = [c for c in C.possible(obs.collector) if not C.is_registered(c)]
        if unknown:
            raise PluginContractError(f"{name}: {obs_name!r}: unregistered collector {unknown}")
    if plugin.settles_by not in ("release", "recover"):
        raise PluginContractError(f"{name}: settles_by must be 'release' or 'recover'")


def check_against_contract(plugin: FaultPlugin[Any], contract: WitnessContract) -> None:
    """Declared observations == the contract's (name, collectors, stage), exactly; and every
    collector a contract requires `independent_of_actuator` reads another component."""
    if contract.kind != plugin.kind:
        raise PluginContractError(f"contract is for {contract.kind}, plugin for {plugin.kind}")
    want = {o.name: (sorted(o.collectors), o.phase) for o in contract.observations}
    have = {
        n: (sorted(C.possible(o.collector)), o.stage.value) for n, o in plugin.observations.items()
    }
    if want != have:
        raise PluginContractError(f"{plugin.kind}: plugin declares {have}, contract wants {want}")
    for o in contract.observations:
        if o.independent_of_actuator:
            mine = plugin.actuator_component
            same = [c for c in o.collectors if C.collector(c).component == mine]
            if same:
                raise PluginContractError(
                    f"{plugin.kind}: {o.name!r} must be collected independently of the actuator's "
                    f"component {plugin.actuator_component!r}, but {same} read it"
                )


def stamp_observations(
    plugin: FaultPlugin[Any], stage: WitnessStage, got: object, source: str
) -> tuple[Observations, list[str]]:
    """What `collect_witness` returned for `stage`, each declared observation stamped with the
    collector identity the engine assigns (`source`: the triggering event's interposer), and the
    problems found (empty list = fine)."""
    if not isinstance(got, dict):
        return {}, [f"collect_witness returned {type(got).__name__}, not a dict"]
    problems: list[str] = []
    expected = set(plugin.stage_names(stage))
    for extra in sorted(set(got) - expected):
        problems.append(f"undeclared observation {extra!r} at {stage}")
    for missing in sorted(expected - set(got)):
        problems.append(f"collector returned no {missing!r} observation")
    out: Observations = {}
    for obs_name in sorted(expected & set(got)):
        obs = got[obs_name]
        if not isinstance(obs, dict):
            problems.append(f"observation {obs_name!r} is not a dict")
            continue
        declared = plugin.observations[obs_name].collector
        name = source if declared == C.TRIGGERING_INTERPOSER else declared
        if name not in C.possible(declared) or not C.is_registered(name):
            problems.append(f"observation {obs_name!r}: no registered collector for {name!r}")
            continue
        c = C.collector(name)
        for key, value in (("collector", c.name), ("component", c.component)):
            if key in obs and obs[key] != value:
                problems.append(
                    f"observation {obs_name!r} labelled {key}={obs[key]!r}; the engine assigns "
                    f"{value!r}"
                )
        out[obs_name] = {**obs, "collector": c.name, "component": c.component}
    return out, problems
