"""Helpers for the MCP tool-server tests: real MCP clients (the `mcp` SDK over Streamable HTTP)
against a real interposer, proxy, destination and trigger engine; and a small attempt harness
that writes the records an attempt writes, so the EVALUATOR (not the test) judges the fault."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mcp import Client

from runner.evaluator.core.canonical import digest
from runner.evaluator.core.types import Phase, Status
from runner.evaluator.evidence.journal import Journal, read_journal
from runner.evaluator.evidence.records import AttemptEnded, AttemptStarted, GraderResult, Record
from runner.evaluator.protocol.faultkinds import FaultKind
from runner.evaluator.protocol.witness import WitnessContract
from runner.evaluator.verdict.outcomes import attempt_status, group_attempts
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.events import Decision, Directive
from runner.runtime.faults.base import FaultPlugin
from runner.runtime.faults.lost_response import read_effects
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from runner.runtime.interposers.mcp_tools import Effects, McpToolServer
from runner.runtime.interposers.tools import ToolInterposer
from tests.runtime_interposers.conftest import CELL

WITNESSES = Path(__file__).resolve().parents[2] / "witnesses"
SCOPE = "run/attempt"
MODES = ("legacy", "auto")  # the initialize handshake (2025 wire), and 2026-07-28 (sessionless)
T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(fn())  # type: ignore[arg-type]


async def call(url: str, tool: str, args: dict[str, Any], mode: str = "legacy") -> Any:
    """One tool call on a fresh MCP connection: the result, or "transport: ..." when the
    response never arrived (the SDK's client gives up its whole connection then)."""
    got: Any = None
    try:
        async with Client(url, mode=mode, read_timeout_seconds=30) as c:
            got = await c.call_tool(tool, args)
    except Exception as exc:  # an ExceptionGroup out of the client's task group
        # (a failure after the result arrived -- closing the session -- is not the call's)
        return got if got is not None else f"transport: {_root(exc)}"
    return got


def _root(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


class RecordingSink:
    """Records every event; answers `directive` at (tool, phase), or holds there until released."""

    def __init__(
        self,
        at: tuple[str, Phase] | None = None,
        directive: Directive = Directive.CONTINUE,
        hold: threading.Event | None = None,
    ) -> None:
        self.at, self.directive, self.hold = at, directive, hold
        self.events: list[tuple[str, str, Phase, str]] = []
        self.completed: list[str] = []
        self.held = threading.Event()
        self.lock = threading.Lock()

    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        with self.lock:
            self.events.append((source, tool, phase, call_id))
        if self.at != (tool, phase):
            return Decision()
        if self.hold is not None:
            self.held.set()
            assert self.hold.wait(30), "never released"
        return Decision(self.directive, lambda: self.completed.append(call_id))


# --- a small attempt: engine + interposer + proxy + destination + MCP, judged by the evaluator ---


@dataclass
class Judged:
    status: Status
    reasons: list[str]
    records: list[Record]
    subject: Any

    @property
    def states(self) -> list[str]:
        return [r.state for r in self.records if r.type == "lifecycle"]  # type: ignore[attr-defined]

    def observations(self) -> dict[str, dict[str, Any]]:
        return {
            r.name: r.observation  # type: ignore[attr-defined]
            for r in self.records
            if r.type == "witness_observation"
        }


@dataclass
class Rig:
    engine: TriggerEngine
    interposer: ToolInterposer
    proxy: EgressProxy
    destination: DestinationService
    mcp: McpToolServer


def judged_attempt(
    journal: Journal,
    destination: DestinationService,
    sandbox: Any,
    *,
    kind: FaultKind,
    trigger: dict[str, Any],
    parameters: dict[str, Any],
    contract: WitnessContract,
    make_plugin: Callable[[Rig], FaultPlugin],
    subject: Callable[[Rig], Any],
) -> Judged:
    """One attempt of an MCP-speaking `subject` with one scheduled fault; the evaluator's own
    `attempt_status` decides (COMPLETED/FAILED = witnessed, else e.g. INVALID_INJECTION)."""
    ref = {"cell_id": CELL, "attempt": 1}
    journal.append(
        AttemptStarted(
            **ref,
            slot_id=digest({"slot": CELL}),
            subject_id="mcp-test",
            subject_config_hash=digest({"subject": "mcp-test"}),
            fault_id="f1",
            kind=kind,
        )
    )
    rejected: list[str] = []
    engine = TriggerEngine(
        journal, cell_id=CELL, attempt=1, on_reject=lambda f, why: rejected.append(why)
    )
    t0 = time.monotonic_ns()
    with (
        ToolInterposer(sandbox, sink=engine) as ti,
        EgressProxy(destination.address, sink=engine, subject_close_timeout=5) as proxy,
        McpToolServer(
            ti,
            effects=Effects.from_proxy_tools(
                proxy.address, SCOPE, {("POST", "/effects"): "submit_patch"}
            ),
        ) as mcp,
    ):
        rig = Rig(engine, ti, proxy, destination, mcp)
        engine.schedule("f1", kind, trigger, make_plugin(rig), parameters, contract)
        engine.arm()
        out = subject(rig)
        engine.finish()
    outcome = "injection_rejected" if rejected else "subject_finished"
    journal.append(
        AttemptEnded(
            **ref,
            outcome=outcome,
            trigger_reached=engine.reached,
            wall_ns=str(time.monotonic_ns() - t0),
        )
    )
    if not rejected:
        items, failures = read_effects(destination.address, SCOPE)
        journal.append(
            GraderResult(
                **ref,
                grader_id="mcp-test",
                grader_version="1",
                scorer_version="1",
                completed=len(items) == 1,
                intended_effects=1,
                committed_effects=len(items),
                shape_ok=not failures,
                shape_failures=failures,
            )
        )
    entries = [(journal.path.stem, e.seq, e.record) for e in read_journal(journal.path)]
    attempt = group_attempts(entries)[CELL][1]
    status, reasons = attempt_status(attempt, kind, parameters, contract, "1")
    return Judged(status, reasons, [e.record for e in read_journal(journal.path)], out)
