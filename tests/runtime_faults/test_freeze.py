"""The freeze kind on real processes and signals: SIGSTOP of the subject's process group, held,
SIGCONT; witnessed from /proc by a collector that is not the actuator (issue 28, item 4).

Two levels: the plugin under the trigger engine, against a real process group launched by the
subject launcher (a parent with a thread and a child, each writing heartbeats), with a stand-in
interposer record; and whole attempts of the minimal subject (`run_case`), where the evaluator
judges the journal against `witnesses/freeze_mid_tool_call.json`. Bad parameters are refused
before any cell runs (exit 2, naming the entry).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.journal import Journal, read_journal
from runner.evaluator.protocol.faultkinds import FREEZE, MAX_FREEZE_MS, FreezeParams
from runner.evaluator.protocol.spec import Trigger
from runner.evaluator.protocol.specload import load_spec, parse_spec
from runner.evaluator.protocol.witness import WitnessContract, evaluate_witness, load_contracts
from runner.orchestrate import workload_for
from runner.runtime.attempt.run import journal_name
from runner.runtime.attempt.services import RunServices
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.events import CallEvent
from runner.runtime.executor import launchers_for
from runner.runtime.faults import registry
from runner.runtime.faults.base import FaultContext
from runner.runtime.faults.freeze_mid_tool_call import (
    FreezeFault,
    GroupSample,
    read_stat,
    sample_group,
)
from runner.runtime.faults.resources import SubjectLimits
from runner.runtime.host import naming
from runner.runtime.host.procs import Reaper, Subject, SubjectLauncher
from runner.runtime.selftest import INVALID_INJECTION, WITNESSED, run_case

ROOT = Path(__file__).resolve().parents[2]
CONTRACT: WitnessContract = load_contracts(ROOT / "witnesses")[FREEZE]
CELL = "sha256:" + "f" * 64
TRIGGER = {"tool": "exec", "ordinal": 1, "phase": "dispatched"}

# A parent with a second thread and a child in its process group; each appends a heartbeat to
# its own file every 10 ms: a stopped group writes none. argv: beats folder [child].
GROUP = """
import subprocess, sys, threading, time
def beat(path):
    with open(path, "a", buffering=1) as f:
        while True:
            f.write(f"{time.monotonic_ns()}\\n")
            time.sleep(0.01)
d = sys.argv[1]
if len(sys.argv) > 2:
    beat(d + "/child")
subprocess.Popen([sys.executable, __file__, d, "child"])
threading.Thread(target=beat, args=(d + "/thread",), daemon=True).start()
beat(d + "/parent")
"""
BEATS = ("parent", "thread", "child")


class OneSubject:
    """The attempt's process registry, reduced to the one subject (`ProcessRegistry`)."""

    def __init__(self, subject: Subject) -> None:
        self.subject = subject

    def current(self) -> Subject | None:
        return self.subject

    def expect_relaunch(self) -> None:
        raise AssertionError("a freeze never asks for a relaunch")

    def request_relaunch(self, reason: str) -> None:
        raise AssertionError("a freeze never asks for a relaunch")


class HeldCall:
    """The tool interposer's record of the triggering call: in flight unless told otherwise."""

    address = ("127.0.0.1", 9)
    epoch = 1

    def __init__(self, in_flight: bool = True) -> None:
        self.in_flight = in_flight

    def bump_epoch(self) -> int:
        raise AssertionError("not used")

    def call_observation(self, call_id: str) -> dict[str, Any]:
        return {"seen": True, "call_id": call_id, "in_flight": self.in_flight}

    def session_observation(self, old_epoch: int) -> dict[str, Any]:
        raise AssertionError("not used")


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[Subject, Path]]:
    beats = tmp_path / "beats"
    beats.mkdir()
    program = tmp_path / "group.py"
    program.write_text(GROUP)
    with Reaper() as reaper:
        launcher = SubjectLauncher(naming.new_run_id(), reaper)
        s = launcher.launch([sys.executable, str(program), str(beats)], state_dir=tmp_path / "st")
        try:
            deadline = time.monotonic() + 10
            while not all(_beats(beats, n) for n in BEATS):  # everyone is running
                assert time.monotonic() < deadline, "the group did not start"
                time.sleep(0.02)
            yield s, beats
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(s.pid, signal.SIGKILL)  # the child too: it outlives its parent
            s.wait(10)
            s.close()


def _beats(d: Path, name: str) -> int:
    p = d / name
    return len(p.read_text().splitlines()) if p.exists() else 0


def _run_engine(
    tmp_path: Path, plugin: Any, duration_ms: int, during: Any = None
) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Schedule the plugin, fire it at the first `exec` call's dispatch, and run `during()` in
    another thread while the engine holds the call; returns the journal and the observations."""
    journal = Journal(tmp_path / "j.jsonl")
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    params = {"target": "subject", "method": "sigstop", "duration_ms": duration_ms}
    engine.schedule("fz", FREEZE, TRIGGER, plugin, params, CONTRACT)
    engine.arm()
    engine.event("tool_interposer", "exec", "received", "c1")
    seen: list[Any] = []
    t = threading.Thread(
        target=lambda: seen.append(engine.event("tool_interposer", "exec", "dispatched", "c1"))
    )
    t.start()
    if during is not None:
        during()
    t.join(60)
    assert not t.is_alive() and seen, "the held call never came back"
    engine.finish()
    journal.close()
    recs = [e.record for e in read_journal(tmp_path / "j.jsonl")]
    obs = {r.name: r.observation for r in recs if r.type == "witness_observation"}
    return recs, obs


def _params(ms: int) -> FreezeParams:
    return FreezeParams(duration_ms=ms)


# --- the plugin on a real process group ------------------------------------------------------


def test_the_whole_group_is_stopped_for_the_duration_and_witnessed(
    tmp_path: Path, group: tuple[Subject, Path]
) -> None:
    subject, beats = group
    plugin = FreezeFault(OneSubject(subject), HeldCall(), None, _params(600))
    frozen_counts: list[dict[str, int]] = []
    states: list[dict[str, str]] = []

    def during() -> None:
        deadline = time.monotonic() + 5
        while _state(subject.pid) != "T":
            assert time.monotonic() < deadline, "never stopped"
            time.sleep(0.005)
        time.sleep(0.05)  # a heartbeat in the pipe at the stop has landed
        states.append(sample_group(subject.pid).states)
        frozen_counts.append({n: _beats(beats, n) for n in BEATS})
        time.sleep(0.3)  # well inside the 600 ms hold
        frozen_counts.append({n: _beats(beats, n) for n in BEATS})

    t0 = time.monotonic()
    recs, obs = _run_engine(tmp_path, plugin, 600, during)
    held = time.monotonic() - t0
    # nothing of the group ran while it was held: parent, its thread and its child
    assert frozen_counts[0] == frozen_counts[1], frozen_counts
    assert len(states[0]) >= 3 and set(states[0].values()) == {"T"}, states
    assert held >= 0.6
    # and everything runs again after release
    time.sleep(0.3)
    after = {n: _beats(beats, n) for n in BEATS}
    assert all(after[n] > frozen_counts[1][n] for n in BEATS), (frozen_counts, after)
    assert _state(subject.pid) not in ("T", "")

    lifecycle = [r.state for r in recs if r.type == "lifecycle"]
    assert lifecycle == ["scheduled", "armed", "injected", "witnessed", "released"]
    (receipt,) = [r for r in recs if r.type == "actuator_receipt"]
    assert receipt.applied and receipt.component == "subject_launcher"
    f, r = obs["frozen"], obs["resumed"]
    assert f["collector"] == "process_registry" and f["component"] == "subject_registry"
    assert f["state"] == "T" and f["all_stopped"] and f["processes"] == 2 and f["threads"] >= 3
    assert r["stopped_before_release"] and r["all_resumed"] and r["held_ms"] >= 600
    assert r["start_time"] == obs["target_process"]["start_time"] == subject.identity.start_time
    verdict = evaluate_witness(
        CONTRACT, obs, {"duration_ms": 600}, actuator_component=receipt.component
    )
    assert verdict.satisfied, verdict.violations


def _state(pid: int) -> str:
    st = read_stat(Path(f"/proc/{pid}/stat"))
    return st.state if st is not None else ""


def test_a_noop_freeze_is_rejected_by_the_contract(
    tmp_path: Path, group: tuple[Subject, Path]
) -> None:
    subject, beats = group
    plugin = FreezeFault(OneSubject(subject), HeldCall(), None, _params(300), stop_timeout=0.3)
    before = _beats(beats, "parent")
    recs, obs = _run_engine(tmp_path, plugin.noop(), 300)
    lifecycle = [r.state for r in recs if r.type == "lifecycle"]
    assert lifecycle == ["scheduled", "armed", "injected", "rejected", "released"]
    (receipt,) = [r for r in recs if r.type == "actuator_receipt"]
    assert receipt.applied  # the no-op says it acted: only the witness tells
    assert obs["frozen"]["state"] != "T" and obs["frozen"]["all_stopped"] is False
    assert obs["resumed"]["sampled"] is False
    verdict = evaluate_witness(
        CONTRACT, obs, {"duration_ms": 300}, actuator_component=receipt.component
    )
    assert {"leader_stopped", "group_stopped", "held_for_duration"} <= set(verdict.violations)
    assert _beats(beats, "parent") > before  # it never stopped


def test_a_rejected_real_freeze_still_continues_the_group(
    tmp_path: Path, group: tuple[Subject, Path]
) -> None:
    """The call was not in flight: the witness fails, yet nothing may stay stopped."""
    subject, beats = group
    plugin = FreezeFault(OneSubject(subject), HeldCall(in_flight=False), None, _params(200))
    recs, obs = _run_engine(tmp_path, plugin, 200)
    assert [r.state for r in recs if r.type == "lifecycle"][-2:] == ["rejected", "released"]
    assert obs["frozen"]["all_stopped"] is True  # it was frozen ...
    assert obs["resumed"]["all_resumed"] is True  # ... and continued
    n = _beats(beats, "child")
    time.sleep(0.2)
    assert _beats(beats, "child") > n
    assert set(sample_group(subject.pid).states.values()) - {"S", "R"} == set()


def test_the_harness_own_group_is_never_stopped(tmp_path: Path) -> None:
    """A subject that shares the harness's process group is refused, not stopped with us."""

    sent: list[int] = []

    class Ours:
        pid = os.getpid()
        status = None

        def kill(self, sig: int) -> None:
            sent.append(sig)  # the leader's pidfd: a stand-in that records, signals nothing

    plugin = FreezeFault(OneSubject(Ours()), HeldCall(), None, _params(100))  # type: ignore[arg-type]
    ev = CallEvent("tool_interposer", "exec", Phase.DISPATCHED, "c1", 1, 1, {})
    ctx = FaultContext("fz", FREEZE, Trigger.model_validate(TRIGGER), ev)
    inj = plugin.inject(ctx)
    assert not inj.applied and "group" in inj.detail["error"]
    plugin.release(ctx)  # what the engine does after the rejection that follows
    assert sent == [signal.SIGSTOP, signal.SIGCONT]  # the leader alone, and continued


# --- the collector's reading of /proc ---------------------------------------------------------

STATES = st.sampled_from(["R", "S", "D", "T", "t", "Z", "X", "I"])


@given(st.dictionaries(st.text("0123456789/", min_size=1, max_size=9), STATES, max_size=6))
def test_a_group_counts_as_stopped_only_when_nothing_can_run(states: dict[str, str]) -> None:
    s = GroupSample(0, 1, 1, states)
    vals = set(states.values())
    assert s.all_stopped == (bool(states) and vals <= {"T", "Z", "X"})
    assert s.none_stopped == (bool(states) and "T" not in vals)
    assert not (s.all_stopped and s.none_stopped) or vals <= {"Z", "X"}


@given(st.text(max_size=16).filter(lambda c: "\n" not in c), STATES, st.integers(1, 2**22))
def test_stat_is_parsed_after_the_last_parenthesis(
    tmp_path_factory: pytest.TempPathFactory, comm: str, state: str, pgrp: int
) -> None:
    """comm may hold spaces and ')' (any process names itself): fields follow the last ')'."""
    rest = [state, "1", str(pgrp), *["0"] * 16, "424242", *["0"] * 30]
    path = tmp_path_factory.mktemp("stat") / "stat"
    path.write_text(f"77 ({comm}) {' '.join(rest)}\n")
    got = read_stat(path)
    assert got is not None and (got.state, got.pgrp, got.start_time) == (state, pgrp, "424242")
    assert read_stat(path.with_name("gone")) is None


def test_the_collector_reads_its_own_process_as_running() -> None:
    s = sample_group(os.getpgrp())
    assert s.processes >= 1 and f"{os.getpid()}/{os.getpid()}" in s.states
    assert not s.all_stopped and s.none_stopped


# --- whole attempts ----------------------------------------------------------------------------


def _journal(services: RunServices, plan: Any) -> list[Any]:
    path = services.run_dir / "journals" / f"{journal_name(plan)}.jsonl"
    return [e.record for e in read_journal(path)]


def test_a_freeze_of_the_minimal_subject_is_witnessed(services: RunServices, image: str) -> None:
    row, plan = run_case(services, FREEZE, "real", image, parameters={"duration_ms": 1500})
    assert row.verdict == WITNESSED and row.status == "COMPLETED", row
    assert row.seconds >= 1.5
    recs = _journal(services, plan)
    obs = {r.name: r.observation for r in recs if r.type == "witness_observation"}
    assert obs["frozen"]["state"] == "T" and obs["frozen"]["all_stopped"] is True
    assert obs["interposer_call"]["collector"] == "tool_interposer"
    assert obs["interposer_call"]["in_flight"] is True
    assert obs["resumed"]["held_ms"] >= 1500 and obs["resumed"]["all_resumed"] is True
    # the same process resumed and finished: one launch, no relaunch
    exits = [r for r in recs if r.type == "subject_exit"]
    assert [(e.restart_index, e.exit_code) for e in exits] == [(0, 0)]
    assert exits[0].start_time == obs["target_process"]["start_time"]


def test_a_freeze_of_a_proxied_call_is_witnessed(services: RunServices, image: str) -> None:
    trigger = {"tool": "submit_patch", "ordinal": 1, "phase": "received"}
    row, plan = run_case(services, FREEZE, "real", image, trigger=trigger)
    assert row.verdict == WITNESSED, row
    obs = {r.name: r.observation for r in _journal(services, plan)
           if r.type == "witness_observation"}  # fmt: skip
    assert obs["interposer_call"]["collector"] == "egress_proxy"
    assert obs["interposer_call"]["in_flight"] is True


def test_a_noop_freeze_of_the_minimal_subject_is_invalid(services: RunServices, image: str) -> None:
    row, plan = run_case(services, FREEZE, "noop", image)
    assert row.verdict == INVALID_INJECTION, row
    assert {"leader_stopped", "group_stopped"} <= set(row.violated), row
    states = [r.state for r in _journal(services, plan) if r.type == "lifecycle"]
    assert states[-2:] == ["rejected", "released"]  # released: nothing may stay held


def test_bench_selftest_covers_the_freeze() -> None:
    """`bench selftest` runs every registered kind; its no-op must fail like every kind's."""
    assert FREEZE in registry.registered()
    result = CliRunner().invoke(app, ["selftest", "--kind", FREEZE, "--json"])
    body = json.loads(result.stdout)
    rows = {r["actuator"]: r for r in body["rows"]}
    assert result.exit_code == 0 and body["ok"], result.stdout + result.stderr
    assert rows["real"]["verdict"] == "WITNESSED"
    assert rows["noop"]["verdict"] == "INVALID_INJECTION"
    assert {"leader_stopped", "group_stopped"} <= set(rows["noop"]["violated"])


# --- bad parameters: exit 2 before any cell runs ---------------------------------------------


def _with_freeze(text: str, parameters: str) -> str:
    fault = (
        '[[faults]]\nid = "freeze-exec"\nkind = "freeze_mid_tool_call"\n'
        'trigger = { tool = "exec", ordinal = 1, phase = "dispatched" }\n'
        f"{parameters}\n\n"
    )
    return text.replace("[matrix]", fault + "[matrix]", 1)


@pytest.mark.parametrize(
    ("parameters", "says"),
    [
        ("parameters = { duration_ms = 0 }", "greater than 0"),
        ("parameters = { duration_ms = -250 }", "greater than 0"),
        (f"parameters = {{ duration_ms = {MAX_FREEZE_MS + 1} }}", "less than or equal"),
        ('parameters = { duration_ms = "500" }', "valid integer"),
        ("parameters = { duration_ms = 1.5 }", "valid integer"),
        ("parameters = { duration_ms = true }", "valid integer"),
        ("", "Field required"),
        ('parameters = { duration_ms = 500, method = "cgroup" }', "sigstop"),
        ("parameters = { duration_ms = 500, seconds = 1 }", "Extra inputs"),
    ],
)
def test_bad_parameters_are_refused_naming_the_entry(parameters: str, says: str) -> None:
    text = _with_freeze((ROOT / "specs/example.toml").read_text(), parameters)
    with pytest.raises(InputError) as e:
        parse_spec(text, Path("spec.toml"))
    assert e.value.key == "faults[4]" and "freeze" in e.value.message, e.value
    assert says in e.value.message, e.value
    assert e.value.line is not None


@given(st.integers(1, MAX_FREEZE_MS), st.floats(0.001, 7200, allow_nan=False))
def test_a_freeze_must_be_shorter_than_the_subject_limit(ms: int, timeout_s: float) -> None:
    bad = FreezeFault.check_subject(_params(ms), SubjectLimits(timeout_s, 3))
    assert (bad is not None) == (ms >= timeout_s * 1000)
    if bad is not None:
        assert bad[0] == "duration_ms" and str(ms) in bad[1]
    assert registry.check_subject(FREEZE, {"duration_ms": ms}, SubjectLimits(timeout_s, 3)) == bad


def test_the_model_bounds_are_the_evaluators() -> None:
    with pytest.raises(ValidationError):
        FreezeParams(duration_ms=0)
    assert FreezeParams(duration_ms=MAX_FREEZE_MS).duration_ms == MAX_FREEZE_MS


def _smoke_copy(tmp_path: Path, parameters: str, subject_extra: str = "") -> Path:
    d = tmp_path / "spec"
    shutil.copytree(ROOT / "specs/swe-lite", d / "swe-lite")
    text = (ROOT / "specs/swe-lite-smoke.toml").read_text()
    spec = d / "smoke.toml"
    spec.write_text(_with_freeze(text, parameters) + subject_extra)
    return spec


def test_a_freeze_beyond_the_subject_limit_exits_2_before_any_run_dir(tmp_path: Path) -> None:
    # the reference subjects run under the default whole-attempt bound, 300 s
    spec = _smoke_copy(tmp_path, "parameters = { duration_ms = 300000 }")
    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(spec), "--draft", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "faults[4].parameters.duration_ms" in res.output and "freeze-exec" in res.output
    assert "time limit (300 s)" in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_the_limit_is_the_subjects_own(tmp_path: Path) -> None:
    """A `command:` subject declares its limit; the check reads it from the adapter."""
    subject = (
        '\n[[subjects]]\nid = "short"\nagent = "command:sleepy"\n'
        'config = { argv = ["/bin/true"], limits = { timeout_s = 2 } }\n'
    )
    ok = _smoke_copy(tmp_path / "ok", "parameters = { duration_ms = 1999 }", subject)
    s = load_spec(ok)
    assert "short" in launchers_for(s, ok, workload_for(s, ok))
    bad = _smoke_copy(tmp_path / "bad", "parameters = { duration_ms = 2000 }", subject)
    s = load_spec(bad)
    with pytest.raises(InputError) as e:
        launchers_for(s, bad, workload_for(s, bad))
    assert e.value.key == "faults[4].parameters.duration_ms"
    assert "'short'" in e.value.message and "(2 s)" in e.value.message
