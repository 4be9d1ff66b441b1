"""One attempt of one cell on the real runtime: `run_attempt(plan, services)`.

Per attempt: netns + veth + nft table, sandbox, destination (127.0.0.1, unreachable from the
subject's namespace), tool interposer and egress proxy bound on the veth's host-side address
(the only things the subject can reach), and when the subject declares them the model proxy
(tool `model` for triggers) and the MCP endpoint (attempt/wiring.py); the trigger engine over the
attempt's journal with the plan's fault plugin, then the subject (under its own unprivileged uid,
relaunched when a fault's recovery asks),
`engine.finish()`, the grade, and `AttemptEnded`. When the engine rejects the witness (its own
run of the evaluator's check failed or timed out) the attempt stops short of recovery: the
subject is never relaunched, nothing is graded, and the attempt ends `injection_rejected`. Any
infrastructure exception becomes a `HarnessError` + `AttemptEnded(outcome="harness_error")`;
teardown removes exactly what the attempt created, also on exceptions. See `attempt_api` for
the contract.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

import runner.runtime.faults.registry as faults
from runner.evaluator.evidence.journal import Journal
from runner.evaluator.evidence.records import (
    AttemptEnded,
    AttemptStarted,
    GraderResult,
    HarnessError,
    SubjectExit,
)
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.subjects import MODEL_TOOL
from runner.runtime.attempt.api import (
    AttemptPlan,
    AttemptResult,
    GradeContext,
    GradeOutcome,
)
from runner.runtime.attempt.api import journal_name as attempt_journal_name
from runner.runtime.attempt.effectcalls import EffectCallSink
from runner.runtime.attempt.grading import make_fresh_sandbox, make_read_ledger
from runner.runtime.attempt.output import LaunchOutput
from runner.runtime.attempt.services import RunServices
from runner.runtime.attempt.subject import SubjectRegistry, prepare_state_dir, subject_uid
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.attempt.wiring import McpSide, ModelSide, start_mcp, start_model_proxy
from runner.runtime.faults.base import check_against_contract
from runner.runtime.faults.resources import AttemptResources, EffectLedger, Endpoint
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.nft import PartitionTable
from runner.runtime.host.procs import ExitStatus
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from runner.runtime.interposers.modelproxy.observe import ExchangeObserver
from runner.runtime.interposers.tools import ToolInterposer
from runner.runtime.sandbox.base import Sandbox, SandboxSpec

Outcome = Literal[
    "subject_finished",
    "subject_gave_up",
    "harness_error",
    "trigger_not_reached",
    "injection_rejected",
]
RELAUNCH_DECISION_TIMEOUT = 60.0  # bounded by the engine's witness timeout (10 s) + collection


def write_task_file(state_dir: Path, task: Mapping[str, Any], name: str = "task.json") -> Path:
    """AFB_TASK_FILE (the agent view) or AFB_ORACLE_FILE (`oracle.json`, the oracle view):
    readable by the subject only (its state directory is its own, 0700)."""
    path = state_dir / name
    path.write_text(json.dumps(dict(task), sort_keys=True, indent=1) + "\n", encoding="utf-8")
    os.chmod(path, 0o444)
    return path


class AttemptError(RuntimeError):
    """An infrastructure failure inside an attempt; `stage` says where."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def journal_name(plan: AttemptPlan) -> str:
    return attempt_journal_name(plan.cell_id, plan.attempt)


# --- the attempt -------------------------------------------------------------------------------


class _Attempt:
    """State of one running attempt; `run()` never raises for infrastructure failures."""

    def __init__(
        self, plan: AttemptPlan, services: RunServices, factory: faults.PluginFactory | None
    ) -> None:
        self.plan = plan
        self.services = services
        self.factory = factory  # None: the kind's own plugin (faults.registry)
        self.name = journal_name(plan)
        self.journal: Journal = services.evidence.journal(self.name)
        self.ref = {"cell_id": plan.cell_id, "attempt": plan.attempt}
        self.stack = ExitStack()
        self.stage = "setup"
        self.started = False
        self.engine: TriggerEngine | None = None
        self.registry: SubjectRegistry | None = None
        self.wall_ns = 0
        self.outcome: Outcome = "harness_error"
        self.tool_calls: dict[str, int] = {}
        self.model: ModelSide | None = None
        self.mcp: McpSide | None = None

    def _ledger_path(self) -> Path:
        return self.services.run_dir / "destination" / f"{self.name}.jsonl"

    def _archive_ledger(self) -> str | None:
        """The destination's own ledger becomes a content-addressed blob of the evidence."""
        path = self._ledger_path()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        address = self.services.evidence.put_blob(data)
        path.unlink()
        return address

    def _archive_model(self) -> dict[str, str]:
        """The cassette served and the one recorded become content-addressed blobs, named by
        `attempt_ended` (served_cassette, recorded_cassette)."""
        out: dict[str, str] = {}
        if self.model is None:
            return out
        try:
            for name, data in (
                ("served_cassette", self.model.served_cassette),
                ("recorded_cassette", self.model.recorded_cassette()),
            ):
                if data is not None:
                    out[name] = self.services.evidence.put_blob(data)
        except Exception as exc:
            self.error("model_proxy", f"archiving the cassette: {type(exc).__name__}: {exc}")
            self.outcome = "harness_error"
        return out

    def error(self, stage: str, message: str) -> None:
        self.journal.append(HarnessError(**self.ref, stage=stage, message=message[:4000]))

    def started_record(self) -> None:
        if not self.started:
            p = self.plan
            self.journal.append(
                AttemptStarted(
                    **self.ref,
                    slot_id=p.slot_id,
                    subject_id=p.subject_id,
                    subject_config_hash=p.subject_config_hash,
                    fault_id=p.fault_id,
                    kind=p.kind,
                )
            )
            self.started = True

    def run(self) -> AttemptResult:
        interrupted: BaseException | None = None
        try:
            try:
                self._setup_and_run()
            except Exception as exc:
                self.started_record()  # an attempt that failed in setup still began
                stage = exc.stage if isinstance(exc, AttemptError) else self.stage
                self.error(stage, f"{type(exc).__name__}: {exc}")
                self.outcome = "harness_error"
            except BaseException as exc:  # ^C: still tear down and end the record, then re-raise
                self.started_record()
                self.error(self.stage, f"interrupted: {type(exc).__name__}")
                self.outcome, interrupted = "harness_error", exc
            self._teardown()
            cassettes = self._archive_model()
            reached = bool(self.engine is not None and self.engine.reached)
            self.journal.append(
                AttemptEnded(
                    **self.ref,
                    outcome=self.outcome,
                    trigger_reached=reached,
                    wall_ns=str(self.wall_ns),
                    detail=self.stage if self.outcome == "harness_error" else "",
                    ledger=self._archive_ledger(),
                    **cassettes,
                )
            )
            if interrupted is not None:
                raise interrupted
            return AttemptResult(
                outcome=self.outcome,
                trigger_reached=reached,
                wall_ns=self.wall_ns,
                tool_calls=self.tool_calls,
                journal=self.journal.path,
            )
        finally:
            self.journal.close()

    def _teardown(self) -> None:
        problems: list[str] = []
        if self.registry is not None:
            try:
                self.registry.stop_all()
            except Exception as exc:
                problems.append(f"subject: {type(exc).__name__}: {exc}")
            try:  # a later attempt may get this uid again: it must not read this state
                os.chown(self.registry.state_dir, 0, 0)
                os.chmod(self.registry.state_dir, 0o700)
            except OSError as exc:
                problems.append(f"state dir: {type(exc).__name__}: {exc}")
        try:
            self.stack.close()
        except Exception as exc:  # ExitStack runs every callback; it re-raises the last failure
            problems.append(f"{type(exc).__name__}: {exc}")
        for p in problems:
            self.error("teardown", p)
        if problems:
            self.outcome = "harness_error"

    def _setup_and_run(self) -> None:
        p, s, st = self.plan, self.services, self.stack
        self.stage = "network"
        net = AttemptNetwork(s.run_id)
        st.callback(net.close)
        net.create()
        assert net.index is not None
        self.stage = "nft"
        table = PartitionTable(s.run_id, net.index, netns=net.netns)
        st.callback(table.delete)
        table.create()
        self.stage = "sandbox"
        sandbox: Sandbox = s.sandbox(
            SandboxSpec(run_id=s.run_id, name_suffix=f"a{net.index}", image=p.image)
        )
        st.callback(sandbox.close)
        st.callback(sandbox.remove)
        sandbox.create()
        sandbox.start()
        self.stage = "sandbox_setup"
        for argv in p.sandbox_setup:
            r = sandbox.exec(list(argv), timeout=300)
            if r.exit_code != 0:
                raise AttemptError(
                    "sandbox_setup", f"{list(argv)} exited {r.exit_code}: {r.stderr[-500:]!r}"
                )
        self.stage = "services"
        dest = DestinationService(self._ledger_path(), idempotency_keys=p.idempotency_keys)
        st.callback(dest.stop)
        dest.start()
        engine = TriggerEngine(
            self.journal, cell_id=p.cell_id, attempt=p.attempt, on_reject=self._stop
        )
        self.engine = engine
        host = str(net.host_addr)
        interposer = ToolInterposer(sandbox, sink=engine, host=host)
        st.callback(interposer.stop)
        interposer.start()
        calls = EffectCallSink(engine, self.journal.append, self.ref)  # journaled in order
        proxy = EgressProxy(dest.address, sink=calls, tool_map=dict(p.proxy_tools), host=host)
        st.callback(proxy.stop)
        proxy.start()
        uid = subject_uid(net.index)
        state_dir = prepare_state_dir(s.subject_root / self.name, uid, uid)
        scope = f"{s.run_id}/{self.name}"
        interposer.set_status(lambda: dest.ledger.status(scope))  # submission_status
        env = {
            **dict(p.subject.env),
            "AFB_INTERPOSER_URL": "http://{}:{}".format(*interposer.address),
            "AFB_EGRESS_URL": "http://{}:{}".format(*proxy.address),
            "AFB_STATE_DIR": str(state_dir),
            "AFB_EVENT_LOG": str(state_dir / "events.jsonl"),
            "AFB_TASK_ID": p.task_id,
            "AFB_SCOPE": scope,
            "HOME": str(state_dir),
        }
        if p.subject.task is not None:
            env["AFB_TASK_FILE"] = str(write_task_file(state_dir, p.subject.task))
        if p.subject.oracle is not None:  # the oracle channel: oracle subjects only
            env["AFB_ORACLE_FILE"] = str(
                write_task_file(state_dir, p.subject.oracle, "oracle.json")
            )
        if p.subject.model is not None:
            self.stage = "model_proxy"
            self.model = start_model_proxy(
                p.subject.model, engine, host, st, on_event=self._model_event,
                observer=ExchangeObserver(
                    self.journal.append, self.ref,
                    on_error=lambda why: self.error("model_observe", why),
                ),
            )  # fmt: skip
            env.update(self.model.subject_env)
        if p.subject.mcp:
            self.stage = "mcp"
            self.mcp = start_mcp(
                interposer, proxy.address, scope, p.proxy_tools, p.subject.tools, host, st
            )
            env.update(self.mcp.subject_env)
        self.stage = "services"
        self.registry = SubjectRegistry(
            s.launcher, p.subject.argv, state_dir=state_dir, netns=net.netns, env=env,
            uid=uid, gid=uid, hidden_paths=p.hidden_paths,
        )  # fmt: skip
        self.stage = "schedule"
        if p.kind != NO_FAULT:
            res = self._resources(net, table, sandbox, dest, interposer, proxy)
            plugin = faults.build(p.kind, res, p.parameters, self.factory)
            if p.actuator == "noop":
                plugin = plugin.noop()
            contract = s.contracts[p.kind]
            check_against_contract(plugin, contract)
            if p.trigger is None:
                raise AttemptError("schedule", f"fault {p.fault_id} ({p.kind}) has no trigger")
            engine.schedule(p.fault_id, p.kind, p.trigger, plugin, p.parameters, contract)
        engine.arm()
        self.started_record()
        self.stage = "subject"
        last = self._run_subject()
        self.stage = "finish"
        self.tool_calls = engine.finish()
        if engine.rejected():
            self.outcome = "injection_rejected"  # nothing to grade: the fault never held
            self.stage = "done"
            return
        if p.kind != NO_FAULT and not engine.reached:
            self.outcome = "trigger_not_reached"
        elif last.exited and last.exit_code == 0:
            self.outcome = "subject_finished"
        else:
            self.outcome = "subject_gave_up"
        self.stage = "grade"
        ctx = GradeContext(
            scope=scope,
            read_ledger=make_read_ledger(dest.address),
            fresh_sandbox=make_fresh_sandbox(s, p.image, f"a{net.index}"),
            tool_calls=dict(self.tool_calls),
        )
        self._grade(p.grade(ctx))
        self.stage = "done"

    def _resources(
        self,
        net: AttemptNetwork,
        table: PartitionTable,
        sandbox: Sandbox,
        dest: DestinationService,
        interposer: ToolInterposer,
        proxy: EgressProxy,
    ) -> AttemptResources:
        """What a fault plugin is built from, with the route of the triggered tool's calls.

        A trigger on tool `model` is carried by the model proxy: its front is an egress proxy
        (source `egress_proxy`, tool `model`) whose backend keeps a ledger by the request's
        `model` field, so plugins see it exactly where they see the egress proxy and the
        destination for other tools. An MCP subject reaches the effect tools through the MCP
        endpoint, never the egress proxy directly: that is the path it connects to.
        """
        assert self.registry is not None
        egress, ledger = proxy, EffectLedger(dest.address)
        reach: Endpoint = proxy
        trigger = self.plan.trigger or {}
        if trigger.get("tool") == MODEL_TOOL and self.model is not None:
            egress = reach = self.model.front
            ledger = EffectLedger(self.model.ledger_address, scope_field="model")
        elif self.mcp is not None:
            reach = self.mcp.server
        return AttemptResources(
            sandbox=sandbox, interposer=interposer, egress=egress, ledger=ledger,
            effect_endpoint=reach, subjects=self.registry, netns=net, table=table,
        )  # fmt: skip

    def _model_event(self, event: Any) -> None:
        """A divergence from the cassette, or a provider failure, is the harness's, not the
        agent's: a HarnessError (the attempt becomes HARNESS_INVALID, retried under the policy).
        An upstream 4xx the agent's own request earned is passed through and not journaled."""
        if not event.harness_fault:
            return
        stage = "model_divergence" if event.kind == "divergence" else "model_upstream"
        detail = {k: v for k, v in event.to_dict().items() if k != "at_ns"}
        self.error(stage, json.dumps(detail, sort_keys=True))

    def _stop(self, fault_id: str, why: str) -> None:
        """The engine rejected `fault_id`'s witness: the subject is never relaunched.

        A subject still running is not killed: its own after-release evidence (a stale session
        failing, a probe after the release) is collected as for a witnessed fault, and the
        evaluator judges the whole contract; the attempt is not graded either way.
        """
        if self.registry is not None:
            self.registry.decline_relaunch(f"{fault_id}: {why}")

    def _run_subject(self) -> ExitStatus:
        p, reg = self.plan, self.registry
        assert reg is not None
        deadline = time.monotonic() + p.subject.timeout_s
        restart_index = 0
        t0 = time.monotonic_ns()
        try:
            while True:
                output = LaunchOutput.mark(reg.state_dir)
                subject = reg.launch(restart_index)
                try:
                    status = subject.wait(max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        subject.kill()
                    status = subject.wait(10)
                    self._exit_record(status, subject.identity.start_time, restart_index, output)
                    raise AttemptError(
                        "subject_timeout", f"subject exceeded {p.subject.timeout_s}s"
                    ) from None
                self._exit_record(status, subject.identity.start_time, restart_index, output)
                again = reg.relaunch_requested(RELAUNCH_DECISION_TIMEOUT)
                if self.engine is not None and self.engine.rejected():
                    return status  # stopped without recovery
                if again is None:
                    raise AttemptError("recover", "no recovery decision after the subject died")
                if not again or restart_index >= p.subject.max_relaunches:
                    return status
                restart_index += 1
        finally:
            self.wall_ns = time.monotonic_ns() - t0

    def _exit_record(
        self, st: ExitStatus, start_time: str, restart_index: int, output: LaunchOutput
    ) -> None:
        self.journal.append(
            SubjectExit(
                **self.ref,
                pid=st.pid,
                start_time=start_time,
                exited=st.exited,
                exit_code=st.exit_code,
                signaled=st.signaled,
                term_signal=st.term_signal,
                restart_index=restart_index,
                **output.tails(),
            )
        )

    def _grade(self, g: GradeOutcome) -> None:
        p = self.plan
        report = self.services.evidence.put_json_blob(dict(g.report)) if g.report else None
        self.journal.append(
            GraderResult(
                **self.ref,
                grader_id=p.grader_id,
                grader_version=p.grader_version,
                scorer_version=p.scorer_version,
                completed=g.completed,
                intended_effects=g.intended_effects,
                committed_effects=g.committed_effects,
                report=report,
                shape_ok=g.shape_ok,
                shape_failures=list(g.shape_failures),
            )
        )


def run_attempt(
    plan: AttemptPlan, services: RunServices, *, plugin_factory: faults.PluginFactory | None = None
) -> AttemptResult:
    """Run one attempt; every outcome, including infrastructure failure, ends in the journal.

    `plugin_factory` replaces the kind's own `FaultPlugin.build` and is called the same way,
    with the attempt's resources and the kind's typed parameters (tests: contradicting actuators).
    """
    if plan.run_id != services.run_id or Path(plan.run_dir).resolve() != services.run_dir:
        raise ValueError("plan and services belong to different runs")
    return _Attempt(plan, services, plugin_factory).run()
