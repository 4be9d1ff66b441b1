"""A reused pid never inherits its previous owner's exit (real processes, the real reaper).

A run's single reaper outlives thousands of processes, and pids wrap (pid_max is 32768 here),
so a later subject can get the pid of an earlier, already reaped one. The published
swe-lite-agents run of 2026-12-01 20:04 met exactly that: a relaunched mini-swe-agent got pid
3018, which an earlier attempt's subject had exited 0 with; the reaper kept statuses by pid and
"reaped" the new process the moment it started, so the attempt ended as if the agent had quit.
The same lookup fed the SIGKILL witness: a no-op kill on a reused pid could be witnessed with
another process's signal 9.

These tests make the collision happen on purpose: `/proc/sys/kernel/ns_last_pid` (root) names
the pid the next process gets, so a new subject is launched under the pid of one just reaped.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from runner.evaluator.core.types import Phase
from runner.evaluator.protocol.faultkinds import SIGKILL_MID_TOOL_CALL
from runner.evaluator.protocol.spec import Trigger
from runner.evaluator.protocol.witness import evaluate_witness, load_contracts
from runner.runtime.attempt.subject import SubjectRegistry, prepare_state_dir
from runner.runtime.events import CallEvent
from runner.runtime.faults.base import FaultContext, WitnessStage, stamp_observations
from runner.runtime.faults.sigkill import SigkillFault
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.procs import ProcError, Reaper, Subject, SubjectLauncher
from tests.process_registry import ProcessRegistry

pytestmark = pytest.mark.runtime

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
WITNESSES = Path(__file__).resolve().parents[2] / "witnesses"


def at_pid(pid: int, spawn: Callable[[], Subject], tries: int = 200) -> Subject:
    """`spawn()` made to get `pid` (free: its last owner was reaped). The kernel hands out
    ns_last_pid + 1 next; another process on the machine may take it first, so retry."""
    for _ in range(tries):
        NS_LAST_PID.write_text(str(pid - 1))
        s = spawn()
        if s.pid == pid:
            return s
        with contextlib.suppress(ProcessLookupError):
            s.kill()
        s.wait(10)
        s.close()
    pytest.fail(f"pid {pid} was not handed out again in {tries} tries")


def _ended(s: Subject, how: str) -> None:
    if how == "killed":
        s.kill(signal.SIGKILL)
    st = s.wait(10)
    assert (st.term_signal, st.exit_code) == ((9, None) if how == "killed" else (None, 0))


@pytest.mark.parametrize("first_ends", ["exited 0", "killed"])
def test_a_reused_pid_does_not_get_the_previous_owners_exit(
    run_id: str, reaper: Reaper, tmp_run_dir: Path, first_ends: str
) -> None:
    launcher = SubjectLauncher(run_id, reaper)
    argv = ["true"] if first_ends == "exited 0" else ["sleep", "1000"]
    first = launcher.launch(argv, state_dir=tmp_run_dir / "a")
    _ended(first, first_ends)
    first_status = first.status
    second = at_pid(
        first.pid, lambda: launcher.launch(["sleep", "1000"], state_dir=tmp_run_dir / "b")
    )
    try:
        # Same pid; even the start time may be equal (it counts 10 ms ticks): only the process
        # handle tells the two apart.
        assert second.pid == first.pid
        # Alive: no status, and waiting times out (it used to return the predecessor's at once).
        assert psutil.Process(second.pid).status() != psutil.STATUS_ZOMBIE
        assert second.status is None
        with pytest.raises(TimeoutError):
            second.wait(0.3)
        # Its own end, by a signal the predecessor's status does not carry.
        sig = signal.SIGTERM if first_ends == "killed" else signal.SIGKILL
        second.kill(sig)
        assert second.wait(10).term_signal == sig
        assert first.status == first_status  # each status stays with its own process
    finally:
        with contextlib.suppress(ProcessLookupError):
            second.kill()
        second.wait(10)
        second.close()
        first.close()


def test_watching_a_live_pid_twice_is_refused(
    run_id: str, reaper: Reaper, tmp_run_dir: Path
) -> None:
    s = SubjectLauncher(run_id, reaper).launch(["sleep", "1000"], state_dir=tmp_run_dir)
    try:
        with pytest.raises(ProcError, match="already watched"):
            reaper.watch(s.pid)
    finally:
        s.kill()
        s.wait(10)
        s.close()


def test_a_relaunch_under_its_predecessors_pid_runs_and_is_stopped(
    run_id: str, reaper: Reaper, tmp_run_dir: Path
) -> None:
    """The attempt's own registry: the relaunch is waited for, and teardown kills it (with a
    map by pid it overwrote its predecessor and, "already exited", was left running)."""
    state = prepare_state_dir(tmp_run_dir / "state")
    with AttemptNetwork(run_id) as net:
        registry = SubjectRegistry(
            SubjectLauncher(run_id, reaper), ["sleep", "1000"], state_dir=state,
            netns=net.netns, env={},
        )  # fmt: skip
        first = registry.launch(0)
        first.kill()
        assert first.wait(10).term_signal == 9
        second = at_pid(first.pid, lambda: registry.launch(1))
        assert registry.current() is second and second.status is None
        stopped = registry.stop_all()
        assert [st.term_signal for st in stopped] == [9]  # the relaunch, killed by teardown
        assert second.status is not None and second.status.term_signal == 9


def _current(subject: Subject) -> ProcessRegistry:
    registry = ProcessRegistry()
    registry.add(subject)
    return registry


class _InFlight:
    """Stand-in for the egress proxy's record of the triggering call (not what is tested)."""

    def find_call(self, call_id: str, connection_id: str | None = None) -> object:
        ex = SimpleNamespace(
            call_id=call_id, tool="model", phases=["received", "dispatched"], outcome="pending"
        )
        return SimpleNamespace(connection_id="m000001"), ex


@pytest.mark.parametrize("actuator", ["real", "noop"])
def test_sigkill_witness_on_a_reused_pid_is_the_targets_own_exit(
    run_id: str, reaper: Reaper, tmp_run_dir: Path, actuator: str
) -> None:
    """The pid's previous owner died of signal 9. The real kill is witnessed by the target's
    own exit; a no-op kill is not witnessed (it used to be, by the predecessor's signal 9)."""
    launcher = SubjectLauncher(run_id, reaper)
    first = launcher.launch(["sleep", "1000"], state_dir=tmp_run_dir / "a")
    _ended(first, "killed")
    target = at_pid(
        first.pid, lambda: launcher.launch(["sleep", "1000"], state_dir=tmp_run_dir / "b")
    )
    try:
        real = SigkillFault(_current(target), None, _InFlight(), reap_timeout=1.0)  # type: ignore[arg-type]
        plugin = real if actuator == "real" else real.noop()
        event = CallEvent("egress_proxy", "model", Phase.DISPATCHED, "m000001.1", 1, 1)
        trigger = Trigger(tool="model", ordinal=1, phase=Phase.DISPATCHED)
        params = {"target": "subject"}  # the schedule's form, as the evaluator judges it
        ctx = FaultContext("kill", SIGKILL_MID_TOOL_CALL, trigger, event)
        obs = {}
        for stage in (WitnessStage.BEFORE_INJECTION, WitnessStage.AFTER_INJECTION):
            if stage is WitnessStage.AFTER_INJECTION:
                assert plugin.inject(ctx).applied  # a no-op claims it too
            got = plugin.collect_witness(ctx, stage)
            stamped, problems = stamp_observations(plugin, stage, got, "egress_proxy")
            assert problems == []
            obs.update(stamped)
        exit_obs = obs["reaper_exit"]
        assert exit_obs["pid"] == first.pid and exit_obs["start_time"] == target.identity.start_time
        contract = load_contracts(WITNESSES)[SIGKILL_MID_TOOL_CALL]
        verdict = evaluate_witness(
            contract, obs, params, actuator_component=plugin.actuator_component
        )
        if actuator == "real":
            assert exit_obs["reaped"] and exit_obs["term_signal"] == 9
            assert verdict.satisfied, verdict.violations
        else:
            assert exit_obs["reaped"] is False and target.status is None
            assert not verdict.satisfied
    finally:
        with contextlib.suppress(ProcessLookupError):
            target.kill()
        target.wait(10)
        target.close()
        first.close()
