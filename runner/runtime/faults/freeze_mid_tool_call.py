"""freeze: stop the subject's process group (SIGSTOP) while the triggering call is held in
flight, keep it stopped for `duration_ms`, then continue it (SIGCONT). The process does not run,
its clocks do: on resume its timers have elapsed, its peers may have given up on it.

Why signals and not a cgroup freezer: a subject is launched by `posix_spawn(setsid=True)`
(`host.procs.SubjectLauncher`), so it leads its own process group, but it has no cgroup of its
own (it stays in the harness's), and the host here mounts cgroup v1 controllers with only an
unused v2 hierarchy beside them. Freezing a cgroup would freeze the harness with it, and moving
the subject into a new one would edit the launcher. The process group is what the subject owns.

Actuator (`subject_launcher`): SIGSTOP to the subject through its pidfd (never a recycled pid),
then `killpg(SIGSTOP)` to its process group, read with getpgid while the subject is stopped and
not reaped (a group id cannot be recycled while its leader is unreaped). A group that is the
harness's own is refused. Release: wait until `duration_ms` after the witness first saw the
whole group stopped, then SIGCONT the same way.

Collectors -- `process_registry`, the attempt's record of its launches read against /proc, not
the launcher's pidfd the actuator signals through:

- `target_process` (before the signal): the current subject's pid, its kernel start time now
  and at launch, its process group and /proc state, and the in-flight call id;
- `frozen` (after the signal): /proc/<pid>/stat and /proc/<pid>/task/*/stat of every process in
  that group, polled until every thread reads T (stopped) or `stop_timeout` passes;
- `resumed` (after release; read during release, persisted at the end of the attempt, when the
  process may be gone): the same reads just before SIGCONT (still all T, and the time since the
  collector first saw them all T) and just after it (no thread T, same start time);
- the interposer that carried the triggering call (after the signal): its record of that call,
  still in flight, as for sigkill (the engine names the collector from the event's source).

A no-op actuator leaves the group running, so `frozen` reads S/R and the contract fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from runner.evaluator.protocol.faultkinds import FREEZE, FreezeParams
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
    SubjectLimits,
    ToolEndpoint,
    held_call_observation,
)
from runner.runtime.host.procs import Subject

BEFORE = WitnessStage.BEFORE_INJECTION
AFTER = WitnessStage.AFTER_INJECTION
AFTER_RELEASE = WitnessStage.AFTER_RELEASE
STOPPED = "T"  # /proc/<pid>/stat state of a stopped task ('t' is a tracing stop: not ours)
EXITED = frozenset({"Z", "X"})  # a thread that has exited cannot run either, stopped or not
POLL_S = 0.005
SHOWN = 8  # threads named in an observation's `not_stopped` / `still_stopped`


# --- the collector's reads of /proc ---------------------------------------------------------


@dataclass(frozen=True)
class ProcStat:
    state: str
    pgrp: int
    start_time: str


def read_stat(path: Path) -> ProcStat | None:
    """A /proc stat file's state, process group and start time; None once the task is gone.
    comm (field 2) may hold spaces and parentheses: split after the last ')'."""
    try:
        text = path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    f = text[text.rindex(")") + 2 :].split()
    return ProcStat(state=f[0], pgrp=int(f[2]), start_time=f[19])


def _group_pids(pgid: int) -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = read_stat(Path(entry.path) / "stat")
            if st is not None and st.pgrp == pgid:
                yield int(entry.name)


@dataclass(frozen=True)
class GroupSample:
    """Every thread of every process of one process group, read once; `at_ns` is when the
    read began, `done_ns` when it ended (monotonic)."""

    at_ns: int
    done_ns: int
    processes: int
    states: dict[str, str]  # "pid/tid" -> state

    @property
    def threads(self) -> int:
        return len(self.states)

    def runnable(self) -> list[str]:
        """Threads neither stopped nor exited: those a freeze has not reached."""
        return sorted(t for t, s in self.states.items() if s != STOPPED and s not in EXITED)

    def stopped(self) -> list[str]:
        return sorted(t for t, s in self.states.items() if s == STOPPED)

    @property
    def exited(self) -> int:
        return sum(s in EXITED for s in self.states.values())

    @property
    def all_stopped(self) -> bool:
        """Nothing of the group can run: every thread T, or a zombie (an exited child its
        stopped parent has not reaped yet); and something was read."""
        return self.threads > 0 and not self.runnable()

    @property
    def none_stopped(self) -> bool:
        return self.threads > 0 and not self.stopped()


def sample_group(pgid: int) -> GroupSample:
    t0 = time.monotonic_ns()
    states: dict[str, str] = {}
    pids = list(_group_pids(pgid))
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for task in os.scandir(f"/proc/{pid}/task"):
                st = read_stat(Path(task.path) / "stat")
                if st is not None:
                    states[f"{pid}/{task.name}"] = st.state
    return GroupSample(t0, time.monotonic_ns(), len(pids), states)


def poll_group(pgid: int, done: str, timeout: float) -> GroupSample:
    """Sample until `done` ('all_stopped' or 'none_stopped') holds or `timeout` passes; the
    last sample either way (a signal is delivered asynchronously: a thread in an uninterruptible
    sleep stops only when it leaves it)."""
    deadline = time.monotonic() + timeout
    while True:
        s = sample_group(pgid)
        if getattr(s, done) or time.monotonic() >= deadline:
            return s
        time.sleep(POLL_S)


# --- the plugin ---------------------------------------------------------------------------------


class FreezeFault(FaultPlugin[FreezeParams]):
    kind = FREEZE
    actuator = "pidfd_send_signal+killpg(SIGSTOP, SIGCONT)"
    actuator_component = "subject_launcher"
    observations = {
        "target_process": Observed("process_registry", BEFORE),
        "frozen": Observed("process_registry", AFTER),
        "interposer_call": Observed(TRIGGERING_INTERPOSER, AFTER),
        "resumed": Observed("process_registry", AFTER_RELEASE),
    }
    settles_by = "release"

    def __init__(
        self,
        registry: ProcessRegistry,
        interposer: ToolEndpoint,
        proxy: CallRecorder | None,
        params: FreezeParams,
        *,
        stop_timeout: float = 2.0,  # under a subject's call timeout: a no-op must not stall it
    ) -> None:
        self.registry = registry
        self.interposer = interposer
        self.proxy = proxy
        self.params = params
        self.stop_timeout = stop_timeout
        self._target: Subject | None = None  # named by the collector before the signal
        self._pgid: int | None = None  # the group the collector read before the signal
        self._signalled: tuple[Subject, int | None] | None = None  # what the actuator stopped
        self._first_stopped_ns: int | None = None  # the collector first saw all of it T
        self._resumed: dict[str, Any] | None = None

    @classmethod
    def build(cls, resources: AttemptResources, params: FreezeParams) -> Self:
        return cls(resources.subjects, resources.interposer, resources.egress, params)

    @classmethod
    def check_subject(cls, params: FreezeParams, limits: SubjectLimits) -> tuple[str, str] | None:
        """A freeze as long as the subject's whole time limit would leave it no time at all."""
        if params.duration_ms >= limits.timeout_s * 1000:
            return "duration_ms", (
                f"a freeze of {params.duration_ms} ms is not shorter than the subject's time "
                f"limit ({limits.timeout_s:g} s)"
            )
        return None

    # --- actuator ---------------------------------------------------------------------------------

    def inject(self, ctx: FaultContext) -> Injection:
        ev = ctx.require_event()
        subject = self.registry.current()
        if subject is None:
            return Injection(applied=False, detail={"error": "no subject process"})
        subject.kill(signal.SIGSTOP)  # pidfd: ProcessLookupError once reaped
        self._signalled = (subject, None)  # whatever fails below, release continues it
        if subject.status is not None:  # reaped: its pid may name another group by now
            return Injection(applied=False, detail={"error": "subject exited", "pid": subject.pid})
        pgid = os.getpgid(subject.pid)
        if pgid <= 1 or pgid == os.getpgrp():
            return Injection(
                applied=False, detail={"error": f"subject shares the harness's group {pgid}"}
            )
        self._signalled = (subject, pgid)
        os.killpg(pgid, signal.SIGSTOP)  # the rest of the group: children it spawned
        return Injection(
            applied=True,
            directive=Directive.CONTINUE,  # the call stays held until release returns
            detail={
                "pid": subject.pid,
                "pgid": pgid,
                "call_id": ev.call_id,
                "source": ev.source,
                "duration_ms": self.params.duration_ms,
            },
        )

    def release(self, ctx: FaultContext) -> None:
        """Hold for the declared duration, then continue the group; the collector reads the
        group just before and just after SIGCONT. Called after a rejected witness too (nothing
        may stay stopped): then without waiting, unless the collector saw it stopped."""
        if self._signalled is None:
            return
        subject, pgid = self._signalled
        before: GroupSample | None = None
        try:
            if self._first_stopped_ns is not None and pgid is not None:
                until = self._first_stopped_ns + self.params.duration_ms * 1_000_000
                while (left := until - time.monotonic_ns()) > 0:
                    time.sleep(left / 1e9)
                before = sample_group(pgid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                subject.kill(signal.SIGCONT)
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGCONT)
        if pgid is None:
            return  # the injection failed: the leader alone was stopped, and is continued
        # The leader first, at once: a subject that exits on resume must still be identified.
        _, leader = self._leader()
        self._resumed = self._resumed_observation(pgid, before, leader)

    # --- collectors -------------------------------------------------------------------------------

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        ev = ctx.require_event()
        if stage is BEFORE:
            return {"target_process": self._target_process(ev.call_id, ev.source)}
        if stage is AFTER:
            return {
                "frozen": self._frozen(),
                "interposer_call": self._call(ev.call_id, ev.source, ev.context),
            }
        return {"resumed": self._resumed or self._not_resumed()}

    def _target_process(self, call_id: str, source: str) -> dict[str, Any]:
        out: dict[str, Any] = {"collector": "process_registry", "call_id": call_id}
        subject = self.registry.current()
        st = read_stat(Path(f"/proc/{subject.pid}/stat")) if subject is not None else None
        if subject is None or st is None:
            return {**out, "pid": None, "start_time": "", "pgid": None, "state": None,
                    "call_source": source}  # fmt: skip
        self._target, self._pgid = subject, st.pgrp
        return {
            **out,
            "pid": subject.pid,
            "start_time": st.start_time,  # the kernel's view, right now
            "launch_start_time": subject.identity.start_time,
            "pgid": st.pgrp,
            "state": st.state,
            "call_source": source,
        }

    def _leader(self) -> tuple[int | None, ProcStat | None]:
        t = self._target
        if t is None:
            return None, None
        st = read_stat(Path(f"/proc/{t.pid}/stat"))
        return t.pid, st

    def _frozen(self) -> dict[str, Any]:
        out: dict[str, Any] = {"collector": "process_registry"}
        if self._target is None or self._pgid is None:
            return {**out, "pid": None, "start_time": "", "pgid": None, "state": None,
                    "all_stopped": False, "processes": 0, "threads": 0}  # fmt: skip
        s = poll_group(self._pgid, "all_stopped", self.stop_timeout)
        if s.all_stopped:
            self._first_stopped_ns = s.done_ns  # every thread T from here on (until SIGCONT)
        pid, st = self._leader()
        return {
            **out,
            "pid": pid,
            "start_time": st.start_time if st else "",
            "pgid": st.pgrp if st else None,
            "state": st.state if st else None,
            "all_stopped": s.all_stopped,
            "processes": s.processes,
            "threads": s.threads,
            "exited": s.exited,
            "not_stopped": s.runnable()[:SHOWN],
            "waited_ms": round((s.done_ns - s.at_ns) / 1e6, 3),
        }

    def _resumed_observation(
        self, pgid: int, before: GroupSample | None, leader: ProcStat | None
    ) -> dict[str, Any]:
        after = poll_group(pgid, "none_stopped", self.stop_timeout)
        pid, now = self._leader()
        st = now or leader  # its state once the group ran again; else the one read at once
        first = self._first_stopped_ns
        held = (before.at_ns - first) / 1e6 if before is not None and first is not None else 0.0
        return {
            "collector": "process_registry",
            "sampled": True,
            "pid": pid,
            "start_time": st.start_time if st else "",
            "state": st.state if st else None,
            # every thread read T just before SIGCONT, over `held_ms` since first seen so
            "stopped_before_release": bool(before is not None and before.all_stopped),
            "held_ms": round(held, 3),
            "duration_ms": self.params.duration_ms,
            "all_resumed": after.none_stopped,
            "processes": after.processes,
            "threads": after.threads,
            "still_stopped": after.stopped()[:SHOWN],
        }

    def _not_resumed(self) -> dict[str, Any]:
        """Release never ran (a no-op actuator), or nothing was stopped: say so."""
        pid = self._target.pid if self._target is not None else None
        return {
            "collector": "process_registry",
            "sampled": False,
            "pid": pid,
            "start_time": "",
            "state": None,
            "stopped_before_release": False,
            "held_ms": 0.0,
            "duration_ms": self.params.duration_ms,
            "all_resumed": False,
        }

    def _call(self, call_id: str, source: str, context: Any) -> dict[str, Any]:
        # as sigkill's, and a call the proxy never saw reads not in flight either
        seen = held_call_observation(self.interposer, self.proxy, call_id, source, context)
        return {"in_flight": False, **seen}


register(
    FaultKindPlugin(
        FreezeFault,
        selftest=SelftestCase(
            trigger={"tool": "exec", "ordinal": 2, "phase": "dispatched"},
            parameters={"duration_ms": 500},
        ),
    )
)
