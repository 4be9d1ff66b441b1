"""sigkill_mid_tool_call: SIGKILL the subject while the triggering tool call is held in flight.

Actuator: `pidfd_send_signal(SIGKILL)` through the launcher's pidfd of the current subject
process (never a bare pid, which could have been recycled).

Collectors:

- `process_registry` (before the signal): the subject's pid and its kernel start time read from
  /proc right now (must equal the identity recorded at launch), and the in-flight call id;
- `reaper` (after): the exit status the run's single reaper collected with waitpid -- not the
  injector -- for the very process named before the signal (its launch handle, never a lookup
  by pid: pids are reused within a run, and a status kept by pid once answered for another
  process), with that process's start identity;
- the interposer that carried the triggering call (after): its record of that call, still in
  flight -- the tool interposer's call log, or for a proxied tool call the egress proxy's
  exchange record. The engine names the collector from the event's source
  (`TRIGGERING_INTERPOSER`); the contract accepts either, independent of the actuator.

Recovery: ask the attempt to relaunch the subject with the same state directory.
"""

from __future__ import annotations

from typing import Any, Self

from runner.evaluator.protocol.faultkinds import SIGKILL_MID_TOOL_CALL, SigkillParams
from runner.runtime.events import Directive
from runner.runtime.faults.base import (
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    WitnessStage,
)
from runner.runtime.faults.collectors import TRIGGERING_INTERPOSER
from runner.runtime.faults.registry import FaultKindPlugin, SelftestCase, register
from runner.runtime.faults.resources import (
    AttemptResources,
    CallRecorder,
    ProcessRegistry,
    ToolEndpoint,
    held_call_observation,
)
from runner.runtime.host.procs import Subject, process_identity

BEFORE = WitnessStage.BEFORE_INJECTION
AFTER = WitnessStage.AFTER_INJECTION


class SigkillFault(FaultPlugin[SigkillParams]):
    kind = SIGKILL_MID_TOOL_CALL
    actuator = "pidfd_send_signal(SIGKILL)"
    actuator_component = "subject_launcher"
    observations = {
        "target_process": Observed("process_registry", BEFORE),
        "reaper_exit": Observed("reaper", AFTER),
        "interposer_call": Observed(TRIGGERING_INTERPOSER, AFTER),
    }
    settles_by = "recover"

    def __init__(
        self,
        registry: ProcessRegistry,
        interposer: ToolEndpoint,
        proxy: CallRecorder | None = None,
        *,
        reap_timeout: float = 3.0,  # under a subject's call timeout: a no-op must not stall it
        params: SigkillParams | None = None,
    ) -> None:
        self.registry = registry
        self.interposer = interposer
        self.proxy = proxy
        self.reap_timeout = reap_timeout
        self._target: Subject | None = None  # the process named before the signal
        self.params = params or SigkillParams()  # target: the subject, the only one

    @classmethod
    def build(cls, resources: AttemptResources, params: SigkillParams) -> Self:
        """The attempt's subjects; the interposers that may carry the triggering call."""
        return cls(resources.subjects, resources.interposer, resources.egress, params=params)

    def inject(self, ctx: FaultContext) -> Injection:
        ev = ctx.require_event()
        subject = self.registry.current()
        if subject is None:
            return Injection(applied=False, detail={"error": "no subject process"})
        self.registry.expect_relaunch()  # before the kill: the attempt must wait for recover()
        subject.kill()
        return Injection(
            applied=True,
            directive=Directive.CONTINUE,
            detail={"pid": subject.pid, "call_id": ev.call_id, "source": ev.source},
        )

    def recover(self, ctx: FaultContext) -> None:
        self.registry.request_relaunch(f"{ctx.fault_id}: subject killed mid tool call")

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        ev = ctx.require_event()
        if stage is BEFORE:
            return {"target_process": self._target_process(ev.call_id, ev.source)}
        return {
            "reaper_exit": self._reaper_exit(),
            "interposer_call": self._call(ev.call_id, ev.source, ev.context),
        }

    # --- collectors -----------------------------------------------------------------------------

    def _target_process(self, call_id: str, source: str) -> dict[str, Any]:
        out: dict[str, Any] = {"collector": "process_registry", "call_id": call_id}
        subject = self.registry.current()
        if subject is None:
            return {**out, "pid": None, "start_time": "", "call_source": source}
        self._target = subject
        try:
            now = process_identity(subject.pid).start_time  # the kernel's view, right now
        except ProcessLookupError:
            now = ""
        return {
            **out,
            "pid": subject.pid,
            "start_time": now,
            "launch_start_time": subject.identity.start_time,
            "call_source": source,
        }

    def _reaper_exit(self) -> dict[str, Any]:
        target = self._target
        out: dict[str, Any] = {"collector": "reaper", "pid": target.pid if target else None}
        if target is None:
            return {**out, "reaped": False, "signaled": False, "term_signal": None}
        out["start_time"] = target.identity.start_time
        try:
            st = target.wait(self.reap_timeout)
        except TimeoutError:
            return {**out, "reaped": False, "signaled": False, "term_signal": None}
        return {**out, "reaped": True, **st.model_dump(exclude={"pid"})}

    def _call(self, call_id: str, source: str, context: Any) -> dict[str, Any]:
        return held_call_observation(self.interposer, self.proxy, call_id, source, context)


register(
    FaultKindPlugin(
        SigkillFault,
        selftest=SelftestCase(
            trigger={"tool": "exec", "ordinal": 2, "phase": "dispatched"},
            parameters={"target": "subject"},
        ),
    )
)
