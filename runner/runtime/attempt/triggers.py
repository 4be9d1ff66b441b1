"""The trigger engine of one attempt: both interposers report call events, faults fire here.

Ordinals are per tool and per attempt, counted when a call is `received` (plus one ordinal over
all tools for "*" triggers); they continue across subject restarts because the engine outlives
the subject. A fault fires exactly once, at the first event matching its (tool, ordinal,
phase); the lifecycle it then drives is described in `runner.runtime.faults.base`.

While a fired fault is not yet witnessed, new calls wait at `received` (bounded): whatever the
subject does next is recovery, and recovery must not start before the witness is durable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.journal import Journal
from runner.evaluator.evidence.records import (
    ActuatorReceipt,
    HarnessError,
    Lifecycle,
    LifecycleTransition,
    ToolCallCount,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.protocol.faultkinds import FaultKind
from runner.evaluator.protocol.spec import Trigger
from runner.runtime.faults.base import (
    CallEvent,
    Directive,
    FaultContext,
    FaultPlugin,
    Injection,
    WitnessStage,
    check_observations,
    validate_plugin,
)

__all__ = ["CallEvent", "Decision", "Directive", "EventSink", "NullSink", "TriggerEngine"]


class Decision:
    """The engine's answer to one event: a directive, and `complete()` to call once applied.

    Interposers must call `complete()` after they applied the directive (response delivered,
    or connection closed and its end observed); it runs deferred witness collection. Idempotent.
    """

    def __init__(
        self,
        directive: Directive = Directive.CONTINUE,
        on_complete: Callable[[], None] | None = None,
    ) -> None:
        self.directive = directive
        self._on_complete = on_complete
        self._lock = threading.Lock()

    def complete(self) -> None:
        with self._lock:
            fn, self._on_complete = self._on_complete, None
        if fn is not None:
            fn()


class EventSink(Protocol):
    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision: ...


class NullSink:
    """For interposers running without faults: every call continues."""

    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        return Decision()


@dataclass
class _Fault:
    fault_id: str
    kind: FaultKind
    trigger: Trigger
    parameters: dict[str, Any]
    plugin: FaultPlugin
    fired: bool = False
    ctx: FaultContext | None = None
    witnessed: bool = False
    settled: bool = False
    after_release_done: bool = False


@dataclass
class _Call:
    tool: str
    ordinal: int
    any_ordinal: int
    phases: list[Phase] = field(default_factory=list)


class TriggerEngine:
    """Thread-safe; one per attempt. Handlers run in the calling interposer thread."""

    def __init__(
        self,
        journal: Journal,
        *,
        cell_id: str,
        attempt: int,
        recovery_gate_timeout: float = 30.0,
    ) -> None:
        self.journal = journal
        self.cell_id = cell_id
        self.attempt = attempt
        self.recovery_gate_timeout = recovery_gate_timeout
        self._lock = threading.Lock()
        self._fire_lock = threading.RLock()  # one handler at a time: faults never interleave
        self._gate = threading.Condition()
        self._unwitnessed = 0
        self._faults: list[_Fault] = []
        self._calls: dict[tuple[str, str], _Call] = {}
        self._by_tool: dict[str, int] = {}
        self._any = 0
        self._armed = False

    # --- schedule -------------------------------------------------------------------------------

    def _ref(self) -> dict[str, Any]:
        return {"cell_id": self.cell_id, "attempt": self.attempt}

    def _life(self, fault_id: str, state: Lifecycle, note: str = "") -> None:
        self.journal.append(
            LifecycleTransition(**self._ref(), fault_id=fault_id, state=state, note=note)
        )

    def _harness_error(self, stage: str, message: str) -> None:
        self.journal.append(HarnessError(**self._ref(), stage=stage, message=message))

    def schedule(
        self,
        fault_id: str,
        kind: FaultKind,
        trigger: Trigger | Mapping[str, Any],
        plugin: FaultPlugin,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        """Register one fault of the cell's resolved schedule (lifecycle `scheduled`)."""
        validate_plugin(plugin)
        if plugin.kind != kind:
            raise ValueError(f"fault {fault_id} is {kind}, plugin implements {plugin.kind}")
        trig = trigger if isinstance(trigger, Trigger) else Trigger.model_validate(dict(trigger))
        with self._lock:
            if self._armed:
                raise RuntimeError("schedule() after arm()")
            if any(f.fault_id == fault_id for f in self._faults):
                raise ValueError(f"fault {fault_id} scheduled twice")
            self._faults.append(_Fault(fault_id, kind, trig, dict(parameters or {}), plugin))
        self._life(fault_id, "scheduled", f"{plugin.variant} {plugin.actuator}")

    def arm(self) -> None:
        """Arm every scheduled fault; call before the subject starts."""
        with self._lock:
            self._armed = True
            faults = list(self._faults)
        for f in faults:
            f.plugin.arm(self._ctx(f, None))
            self._life(f.fault_id, "armed")

    def _ctx(self, f: _Fault, event: CallEvent | None) -> FaultContext:
        return FaultContext(f.fault_id, f.kind, f.trigger, f.parameters, event)

    # --- events ---------------------------------------------------------------------------------

    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        phase = Phase(phase)
        if phase is Phase.RECEIVED:
            self._wait_for_witnesses()
        key = (source, call_id)
        with self._lock:
            if phase is Phase.RECEIVED:
                self._any += 1
                self._by_tool[tool] = self._by_tool.get(tool, 0) + 1
                self._calls[key] = _Call(tool, self._by_tool[tool], self._any)
            call = self._calls.get(key)
            if call is None or call.tool != tool:
                return Decision()  # a phase of a call never received here: nothing to match
            call.phases.append(phase)
            ctx = dict(context or {})
            ev = CallEvent(source, tool, phase, call_id, call.ordinal, call.any_ordinal, ctx)
            due = [f for f in self._faults if not f.fired and self._armed and _matches(f, ev)]
            for f in due:
                f.fired = True
                f.ctx = self._ctx(f, ev)
            if due:  # counted before the lock drops, so no new call slips past the gate
                with self._gate:
                    self._unwitnessed += len(due)
        if not due:
            return Decision()
        with self._fire_lock:
            injections = [(f, self._fire(f)) for f in due]
            for f, _ in injections:
                if not f.plugin.witness_after_directive:
                    self._witness_and_settle(f)
        directive = max((i.directive for _, i in injections), key=lambda d: d.strength)
        deferred = [f for f, _ in injections if f.plugin.witness_after_directive]
        if not deferred:
            return Decision(directive)

        def complete() -> None:
            for f in deferred:
                self._witness_and_settle(f)

        return Decision(directive, complete)

    def _fire(self, f: _Fault) -> Injection:
        ctx = f.ctx
        assert ctx is not None and ctx.event is not None
        ev = ctx.event
        self.journal.append(
            TriggerReached(
                **self._ref(),
                fault_id=f.fault_id,
                call_id=ev.call_id,
                tool=ev.tool,
                ordinal=f.trigger.ordinal,
                phase=ev.phase,
            )
        )
        self._collect(f, WitnessStage.BEFORE_INJECTION)
        try:
            inj = f.plugin.inject(ctx)
            if not isinstance(inj, Injection):
                raise TypeError(f"inject returned {type(inj).__name__}, not an Injection")
        except Exception as exc:  # the receipt must say the actuator failed, not vanish
            self._harness_error("inject", f"{f.fault_id}: {type(exc).__name__}: {exc}")
            inj = Injection(applied=False, detail={"error": f"{type(exc).__name__}: {exc}"})
        self.journal.append(
            ActuatorReceipt(
                **self._ref(),
                fault_id=f.fault_id,
                kind=f.kind,
                actuator=f.plugin.actuator,
                applied=inj.applied,
                detail={**dict(inj.detail), "directive": inj.directive.value},
            )
        )
        self._life(f.fault_id, "injected", f"{ev.source} {ev.tool}#{ev.ordinal} at {ev.phase}")
        return inj

    def _collect(self, f: _Fault, stage: WitnessStage) -> bool:
        """Collect and durably write `stage`'s observations; False if anything went wrong."""
        if not f.plugin.stage_names(stage):
            return True
        assert f.ctx is not None
        try:
            got = f.plugin.collect_witness(f.ctx, stage)
        except Exception as exc:
            self._harness_error("witness", f"{f.fault_id} {stage}: {type(exc).__name__}: {exc}")
            return False
        problems = check_observations(f.plugin, stage, got)
        for name in f.plugin.stage_names(stage):
            obs = got.get(name) if isinstance(got, dict) else None
            if isinstance(obs, dict):
                self.journal.append(
                    WitnessObservation(
                        **self._ref(), fault_id=f.fault_id, kind=f.kind, name=name, observation=obs
                    )
                )
        for p in problems:
            self._harness_error("witness", f"{f.fault_id} {stage}: {p}")
        return not problems

    def _witness_and_settle(self, f: _Fault) -> None:
        with self._fire_lock:
            if f.settled:
                return
            try:
                ok = self._collect(f, WitnessStage.AFTER_INJECTION)
                if ok:  # every observation above was fsync'd by Journal.append
                    self._life(f.fault_id, "witnessed")
                    f.witnessed = True
                self._settle(f, "" if ok else "witness collection failed")
            finally:
                f.settled = True
                with self._gate:
                    self._unwitnessed -= 1
                    self._gate.notify_all()

    def _settle(self, f: _Fault, note: str) -> None:
        assert f.ctx is not None
        try:
            if f.plugin.settles_by == "recover":
                f.plugin.recover(f.ctx)
            else:
                f.plugin.release(f.ctx)
        except Exception as exc:
            self._harness_error(f.plugin.settles_by, f"{f.fault_id}: {type(exc).__name__}: {exc}")
            note = f"{note}; {f.plugin.settles_by} failed".lstrip("; ")
        state: Lifecycle = "recovered" if f.plugin.settles_by == "recover" else "released"
        self._life(f.fault_id, state, note)

    def _wait_for_witnesses(self) -> None:
        deadline = time.monotonic() + self.recovery_gate_timeout
        with self._gate:
            while self._unwitnessed > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return  # an interposer never completed; the missing witness will show
                self._gate.wait(left)

    # --- end of attempt -------------------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Settle what is pending, collect after-release observations, write the call counts."""
        with self._lock:
            fired = [f for f in self._faults if f.fired]
        for f in fired:
            if not f.settled:
                self._witness_and_settle(f)
            if not f.after_release_done:
                f.after_release_done = True
                with self._fire_lock:
                    self._collect(f, WitnessStage.AFTER_RELEASE)
        counts = self.counts()
        self.journal.append(
            ToolCallCount(**self._ref(), calls=sum(counts.values()), by_tool=counts)
        )
        return counts

    # --- introspection --------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._by_tool.items()))

    def fired(self) -> list[str]:
        with self._lock:
            return [f.fault_id for f in self._faults if f.fired]

    @property
    def reached(self) -> bool:
        return bool(self.fired())

    def calls(self) -> Sequence[tuple[str, str, str, int]]:
        """(source, call_id, tool, ordinal) of every call seen, for diagnostics."""
        with self._lock:
            return [(s, c, v.tool, v.ordinal) for (s, c), v in self._calls.items()]


def _matches(f: _Fault, ev: CallEvent) -> bool:
    t = f.trigger
    if t.phase is not ev.phase:
        return False
    if t.tool == "*":
        return t.ordinal == ev.any_ordinal
    return t.tool == ev.tool and t.ordinal == ev.ordinal
