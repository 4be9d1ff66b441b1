"""A real MCP client against the interposer in front of a real Podman sandbox, and a real
sandbox restart under a live MCP session, judged by the evaluator against
witnesses/sandbox_restart.json (the stale session and the reattachment happen over MCP).

Runtime test (root, Podman): run serialized, `flock /tmp/afb/runtime.lock pytest -m runtime ...`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import Journal
from runner.evaluator.protocol.faultkinds import SANDBOX_RESTART, FaultKind
from runner.evaluator.protocol.witness import WitnessContract
from runner.runtime.faults.base import FaultPlugin
from runner.runtime.faults.sandbox_restart import SandboxRestartFault
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.mcp_tools import McpToolServer
from runner.runtime.interposers.tools import ToolInterposer
from runner.runtime.sandbox.base import Sandbox
from tests.mcp.helpers import Rig, judged_attempt, run
from tests.podman_sandbox import running_test_sandbox

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def podman() -> Iterator[Sandbox]:
    with running_test_sandbox("mcp") as sb:
        yield sb


def test_a_real_mcp_client_lists_and_calls_the_tools(podman: Sandbox) -> None:
    with (
        ToolInterposer(podman, run_tests_argv=["/bin/sh", "-c", "test -f /tmp/m.txt"]) as ti,
        McpToolServer(ti) as m,
    ):

        async def go() -> tuple[list[str], list[Any]]:
            async with Client(m.url, mode="legacy") as c:
                names = [t.name for t in (await c.list_tools()).tools]
                return names, [
                    await c.call_tool("write_file", {"path": "/tmp/m.txt", "content": "boxed\n"}),
                    await c.call_tool("read_file", {"path": "/tmp/m.txt"}),
                    await c.call_tool("exec", {"argv": ["sh", "-c", "cat /tmp/m.txt; exit 4"]}),
                    await c.call_tool("run_tests", {}),
                    await c.call_tool("read_file", {"path": "/etc/no-such-file"}),
                ]

        names, (w, r, e, t, missing) = run(go)
        counts = ti.counts()
    assert names == ["read_file", "write_file", "exec", "run_tests"]
    assert w.structured_content == {"bytes": 6}
    assert r.structured_content == {"content": "boxed\n"}
    assert e.structured_content == {"exit_code": 4, "stdout": "boxed\n", "stderr": ""}
    assert t.structured_content["passed"] is True
    assert missing.is_error and missing.structured_content["error"] == "tool_error"
    assert counts == {"exec": 1, "read_file": 2, "run_tests": 1, "write_file": 1}


def _restart_subject(rig: Rig) -> list[Any]:
    """Write, then keep working: the call after the restart fails, the next one reattaches."""

    async def go() -> list[Any]:
        async with Client(rig.mcp.url, mode="legacy") as c:
            return [
                await c.call_tool("write_file", {"path": "/tmp/r.txt", "content": "kept\n"}),
                await c.call_tool("exec", {"argv": ["cat", "/tmp/r.txt"]}),
                await c.call_tool("exec", {"argv": ["cat", "/tmp/r.txt"]}),
            ]

    return run(go)


@pytest.mark.parametrize("actuator", ["real", "noop"])
def test_a_sandbox_restart_under_an_mcp_session(
    podman: Sandbox,
    journal: Journal,
    destination: DestinationService,
    contracts: dict[FaultKind, WitnessContract],
    actuator: str,
) -> None:
    def plugin(rig: Rig) -> FaultPlugin:
        p = SandboxRestartFault(podman, rig.interposer)
        return p.noop() if actuator == "noop" else p

    j = judged_attempt(
        journal, destination, podman, kind=SANDBOX_RESTART,
        trigger={"tool": "write_file", "ordinal": 1, "phase": "response_sent"},
        parameters={"mode": "restart"}, contract=contracts[SANDBOX_RESTART],
        make_plugin=plugin, subject=_restart_subject,
    )  # fmt: skip
    write, after, again = j.subject
    assert not write.is_error
    if actuator == "noop":
        assert j.status is Status.INVALID_INJECTION, j.reasons
        assert not after.is_error and not again.is_error  # nothing restarted, nothing stale
        return
    assert j.status is Status.FAILED, j.reasons  # witnessed; this subject commits no effect
    assert "witnessed" in j.states
    assert after.is_error and after.structured_content["error"] == "stale_session"
    assert "sandbox restarted" in after.content[0].text
    assert not again.is_error and again.structured_content["stdout"] == "kept\n"
    session = j.observations()["interposer_session"]
    assert session["stale_session_failed"] and session["reattached"]
    assert session["stale_call_id"].startswith("mcp-")
