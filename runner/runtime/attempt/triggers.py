"""The trigger engine of one attempt: both interposers report call events, faults fire here.

Ordinals are per tool and per attempt, counted when a call is `received` (plus one ordinal over
all tools for "*" triggers); they continue across subject restarts because the engine outlives
the subject. A fault fires exactly once, at the first event matching its (tool, ordinal,
phase); the lifecycle it then drives is described in `runner.runtime.faults.base`.

While a fired fault is not yet witnessed, new calls wait at `received`: whatever the subject
does next is recovery, and recovery must not start before the witness is durable and judged.
The wait is bounded by `witness_timeout`; a witness that does not arrive in time, or that the
evaluator's own check (`evaluate_witness`, up to the after-injection observations) rejects, ends
the fault `rejected`: never recovered, and `on_reject` stops the attempt (INVALID_INJECTION).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
from runner.evaluator.protocol.witness import WitnessContract, evaluate_witness
from runner.runtime.events import CallEvent, Decision
from runner.runtime.faults.base import (
    FaultContext,
    FaultPlugin,
    Injection,
    WitnessStage,
    check_against_contract,
    stamp_observations,
    validate_plugin,
)

__all__ = ["TriggerEngine"]


@dataclass
class _Fault:
    fault_id: str
    kind: FaultKind
    trigger: Trigger
    parameters: dict[str, Any]
    plugin: FaultPlugin[Any]
    contract: WitnessContract | None = None
    fired: bool = False
    ctx: FaultContext | None = None
    rejected: bool = False
    settled: bool = False
    after_release_done: bool = False
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)  # as persisted, by name
    collection_failed: bool = False
    timer: threading.Timer | None = None


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
        witness_timeout: float = 10.0,
        on_reject: Callable[[str, str], None] | None = None,
    ) -> None:
        self.journal = journal
        self.cell_id = cell_id
        self.attempt = attempt
        self.witness_timeout = witness_timeout
        self.on_reject = on_reject  # (fault_id, why): stop the attempt, without recovery
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
        plugin: FaultPlugin[Any],
        parameters: Mapping[str, Any] | None = None,
        contract: WitnessContract | None = None,
    ) -> None:
        """Register one fault of the cell's resolved schedule (lifecycle `scheduled`).

        With a `contract` the engine judges the witness before it recovers (the runtime always
        passes one; without, only the collection itself must succeed -- engine unit tests).
        `parameters` is the schedule's defaulted form, what the witness check reads; the plugin
        was built with its typed copy.
        """
        validate_plugin(plugin)
        if plugin.kind != kind:
            raise ValueError(f"fault {fault_id} is {kind}, plugin implements {plugin.kind}")
        if contract is not None:
            check_against_contract(plugin, contract)
        trig = trigger if isinstance(trigger, Trigger) else Trigger.model_validate(dict(trigger))
        with self._lock:
            if self._armed:
                raise RuntimeError("schedule() after arm()")
            if any(f.fault_id == fault_id for f in self._faults):
                raise ValueError(f"fault {fault_id} scheduled twice")
            self._faults.append(
                _Fault(fault_id, kind, trig, dict(parameters or {}), plugin, contract)
            )
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
        return FaultContext(f.fault_id, f.kind, f.trigger, event)

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
                else:  # the interposer must complete in time, or the fault is rejected
                    f.timer = threading.Timer(
                        self.witness_timeout, self._witness_and_settle, [f, True]
                    )
                    f.timer.daemon = True
                    f.timer.start()
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
                component=f.plugin.actuator_component,
                applied=inj.applied,
                detail={**dict(inj.detail), "directive": inj.directive.value},
            )
        )
        self._life(f.fault_id, "injected", f"{ev.source} {ev.tool}#{ev.ordinal} at {ev.phase}")
        return inj

    def _collect(self, f: _Fault, stage: WitnessStage) -> bool:
        """Collect, stamp (collector identity from the registry) and durably write `stage`'s
        observations; False if anything went wrong."""
        if not f.plugin.stage_names(stage):
            return True
        assert f.ctx is not None and f.ctx.event is not None
        try:
            got = f.plugin.collect_witness(f.ctx, stage)
        except Exception as exc:
            self._harness_error("witness", f"{f.fault_id} {stage}: {type(exc).__name__}: {exc}")
            f.collection_failed = True
            return False
        stamped, problems = stamp_observations(f.plugin, stage, got, f.ctx.event.source)
        for name, obs in stamped.items():
            self.journal.append(
                WitnessObservation(
                    **self._ref(), fault_id=f.fault_id, kind=f.kind, name=name, observation=obs
                )
            )
            f.observed[name] = obs
        for p in problems:
            self._harness_error("witness", f"{f.fault_id} {stage}: {p}")
        f.collection_failed |= bool(problems)
        return not problems

    def _judge(self, f: _Fault) -> str:
        """Why the persisted witness does not hold ('' when it does): the evaluator's check."""
        if f.collection_failed:
            return "witness collection failed"
        if f.contract is None:
            return ""
        verdict = evaluate_witness(
            f.contract,
            f.observed,
            f.parameters,
            actuator_component=f.plugin.actuator_component,
            until="after_injection",
        )
        return "" if verdict.satisfied else "witness failed: " + ", ".join(verdict.violations)

    def _witness_and_settle(self, f: _Fault, timed_out: bool = False) -> None:
        """Collect, judge, then settle (witnessed) or not (rejected); once per fault."""
        with self._fire_lock:
            if f.settled:
                return
            try:
                if timed_out:  # the deferred witness did not complete within witness_timeout
                    why = f"witness timed out after {self.witness_timeout:g} s"
                else:
                    self._collect(f, WitnessStage.AFTER_INJECTION)
                    why = self._judge(f)  # on what Journal.append has fsync'd
                if why:
                    self._reject(f, why)
                else:
                    self._life(f.fault_id, "witnessed")
                    self._settle(f, "")
            finally:
                f.settled = True
                if f.timer is not None:
                    f.timer.cancel()
                with self._gate:
                    self._unwitnessed -= 1
                    self._gate.notify_all()

    def _reject(self, f: _Fault, why: str) -> None:
        """Not witnessed: never recovered; a release still undoes the disturbance (nothing may
        stay held); `on_reject` stops the attempt."""
        f.rejected = True
        self._life(f.fault_id, "rejected", why[:2000])
        if f.plugin.settles_by == "release":
            self._settle(f, "after rejection")
        if self.on_reject is not None:
            try:
                self.on_reject(f.fault_id, why)
            except Exception as exc:
                self._harness_error("reject", f"{f.fault_id}: {type(exc).__name__}: {exc}")

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
        deadline = time.monotonic() + self.witness_timeout
        with self._gate:
            while self._unwitnessed > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._gate.wait(left)
            else:
                return
        with self._lock:  # an interposer never completed: those faults are rejected, not let go
            pending = [f for f in self._faults if f.fired and not f.settled]
        for f in pending:
            self._witness_and_settle(f, timed_out=True)

    # --- end of attempt -------------------------------------------------------------------------

    def finish(self) -> dict[str, int]:
        """Settle what is pending, collect after-release observations, write the call counts.

        A fault whose interposer has not completed its call yet (the proxy may still be
        watching the subject's end) is waited for first, within the witness timeout, so it is
        judged on complete observations rather than rejected early."""
        self._wait_for_witnesses()
        with self._lock:
            fired = [f for f in self._faults if f.fired]
        for f in fired:
            if not f.settled:
                self._witness_and_settle(f)
            if not f.after_release_done:  # rejected too: the evaluator judges the whole contract
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

    def rejected(self) -> list[str]:
        """Faults whose witness the engine rejected (or that timed out): the attempt stops."""
        with self._lock:
            return [f.fault_id for f in self._faults if f.rejected]


def _matches(f: _Fault, ev: CallEvent) -> bool:
    t = f.trigger
    if t.phase is not ev.phase:
        return False
    if t.tool == "*":
        return t.ordinal == ev.any_ordinal
    return t.tool == ev.tool and t.ordinal == ev.ordinal
