"""The MCP tool server with a real MCP client: catalogue, results, the same events and ordinals
as the HTTP API, directives that really withhold the response, and sessions across restarts.

The sandbox is a local stand-in (these tests are about the MCP seam, not the sandbox; the real
Podman sandbox is `test_podman.py`)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.journal import EvidenceStore, Journal, read_journal
from runner.evaluator.evidence.records import TriggerReached
from runner.evaluator.protocol.faultkinds import SIGKILL_MID_TOOL_CALL
from runner.evaluator.protocol.spec import Tool
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.events import Directive
from runner.runtime.interposers.mcp_tools import Effects, McpToolServer
from runner.runtime.interposers.tools import ToolInterposer
from tests.mcp.helpers import MODES, RecordingSink, call, run
from tests.runtime_interposers.conftest import CELL, LocalSandbox, request
from tests.runtime_interposers.test_triggers import Probe

SPEC_TOOLS = [
    Tool(name="read_file"),
    Tool(name="write_file"),
    Tool(name="exec"),
    Tool(name="run_tests"),
    Tool(name="submit_patch", irreversible=True, description="the patch lands in the ledger"),
]
PHASES = [Phase.RECEIVED, Phase.DISPATCHED, Phase.EFFECT_DONE, Phase.RESPONSE_SENT]


def http_call(ti: ToolInterposer, tool: str, args: dict[str, Any]) -> tuple[int, Any]:
    sid = request(ti.address, "POST", "/session", {})[1]["session_id"]
    return request(ti.address, "POST", "/call", {"session_id": sid, "tool": tool, "args": args})


# --- catalogue ------------------------------------------------------------------------------


def test_lists_the_spec_tools_with_schemas_and_annotations(ti: ToolInterposer) -> None:
    effects = Effects(("127.0.0.1", 9), "s", Effects.from_proxy_tools(
        ("127.0.0.1", 9), "s", {("POST", "/effects"): "submit_patch"}).routes)  # fmt: skip
    with McpToolServer(ti, tools=SPEC_TOOLS, effects=effects) as m:

        async def go() -> Any:
            async with Client(m.url, mode="legacy") as c:
                return (await c.list_tools()).tools

        tools = {t.name: t for t in run(go)}
    assert sorted(tools) == sorted([t.name for t in SPEC_TOOLS] + ["list_effects"])
    submit = tools["submit_patch"]
    assert submit.description == "the patch lands in the ledger"
    assert submit.input_schema["required"] == ["payload"]
    assert submit.annotations is not None and submit.annotations.destructive_hint is True
    assert tools["exec"].input_schema["required"] == ["argv"]
    assert tools["read_file"].annotations is not None
    assert tools["read_file"].annotations.read_only_hint is True
    assert (
        tools["exec"].annotations is not None
        and tools["exec"].annotations.destructive_hint is False
    )


def test_a_spec_tool_without_a_handler_is_refused_by_name(ti: ToolInterposer) -> None:
    with pytest.raises(ValueError, match="'deploy' has no MCP handler"):
        McpToolServer(ti, tools=[*SPEC_TOOLS[:4], Tool(name="deploy", irreversible=True)])
    with pytest.raises(ValueError, match="'submit_patch' has no MCP handler"):
        McpToolServer(ti, tools=SPEC_TOOLS)  # no effect route for it
    # a tool another interposer serves (model calls through the model proxy) is left out
    m = McpToolServer(ti, tools=[*SPEC_TOOLS[:4], Tool(name="model")], elsewhere={"model"})
    assert [t.name for t in m._tools] == ["read_file", "write_file", "exec", "run_tests"]


# --- results --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_tools_return_results_and_tool_errors(
    server: McpToolServer, ti: ToolInterposer, mode: str
) -> None:
    async def go() -> list[Any]:
        async with Client(server.url, mode=mode) as c:
            return [
                await c.call_tool("write_file", {"path": "/w/a.txt", "content": "héllo\n"}),
                await c.call_tool("read_file", {"path": "/w/a.txt"}),
                await c.call_tool(
                    "exec", {"argv": ["sh", "-c", "cat; echo err >&2"], "stdin": "x"}
                ),
                await c.call_tool("run_tests", {}),
                await c.call_tool("read_file", {"path": "/w/missing"}),
                await c.call_tool("exec", {"argv": []}),
            ]

    w, r, e, t, missing, bad = run(go)
    assert not w.is_error and w.structured_content == {"bytes": 7}
    assert r.structured_content == {"content": "héllo\n"}
    assert e.structured_content == {"exit_code": 0, "stdout": "x", "stderr": "err\n"}
    assert t.structured_content["passed"] is False and t.structured_content["exit_code"] == 3
    assert missing.is_error and missing.structured_content["error"] == "tool_error"
    assert "FileNotFoundError" in missing.structured_content["message"]
    assert bad.is_error and bad.structured_content["error"] == "bad_arguments"
    # the malformed call was refused before it counted, as over HTTP
    assert ti.counts() == {"exec": 1, "read_file": 2, "run_tests": 1, "write_file": 1}


def test_an_unknown_tool_is_a_protocol_error(server: McpToolServer) -> None:
    async def go() -> MCPError | None:
        async with Client(server.url, mode="legacy") as c:
            try:
                await c.call_tool("submit_patch", {"payload": {}})
            except MCPError as exc:
                return exc
        return None

    err = run(go)
    assert err is not None and "unknown tool 'submit_patch'" in str(err)


# --- the same events and ordinals as the HTTP API -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_an_mcp_call_reports_the_same_events_as_an_http_call(
    server: McpToolServer, ti: ToolInterposer, sink: RecordingSink, mode: str
) -> None:
    assert http_call(ti, "exec", {"argv": ["true"]})[0] == 200
    result = run(lambda: call(server.url, "exec", {"argv": ["true"]}, mode))
    assert not isinstance(result, str) and not result.is_error
    # `response_sent` comes after the client had its response (on either wire): wait for both
    assert all(ti.wait_call(cid) is not None for cid in list(ti._calls))
    by_call: dict[str, list[tuple[str, str, Phase]]] = {}
    for source, tool, phase, cid in sink.events:
        by_call.setdefault(cid, []).append((source, tool, phase))
    (h, hev), (m, mev) = sorted(by_call.items(), key=lambda kv: kv[0].startswith("mcp-"))
    assert h.startswith("ti-") and m.startswith("mcp-")
    assert hev == mev == [("tool_interposer", "exec", p) for p in PHASES]
    assert ti.call_observation(m)["outcome"] == "ok"


@pytest.fixture(scope="module")
def shared() -> Any:
    """One interposer + MCP server for many hypothesis examples (a fresh engine per example)."""
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="afb-mcp-h-"))
    with ToolInterposer(LocalSandbox(root)) as ti, McpToolServer(ti) as m:
        yield ti, m


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(
        st.tuples(st.sampled_from(["http", "mcp"]), st.sampled_from(["exec", "read_file"])),
        min_size=1,
        max_size=6,
    ),
    pick=st.integers(min_value=0, max_value=5),
    phase=st.sampled_from(PHASES),
)
def test_ordinals_count_mcp_and_http_calls_alike(
    shared: Any, tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[str, str]], pick: int,
    phase: Phase,
) -> None:  # fmt: skip
    """Whatever the interleaving of wires, a trigger at (tool, N, phase) fires at the Nth call of
    that tool -- on whichever wire carried it -- exactly once, and the counts are per tool."""
    ti, m = shared
    tool = calls[pick % len(calls)][1]
    nth = sum(1 for _, t in calls[: pick % len(calls) + 1] if t == tool)
    with EvidenceStore(tmp_path_factory.mktemp("j")).journal("attempt") as journal:
        engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
        probe = Probe()
        engine.schedule(
            "p", SIGKILL_MID_TOOL_CALL, {"tool": tool, "ordinal": nth, "phase": phase.value}, probe
        )
        engine.arm()
        ti.sink = engine
        seen: list[tuple[str, str]] = []  # (wire, call id)
        for w, t in calls:
            args: dict[str, Any] = {"argv": ["true"]} if t == "exec" else {"path": "/etc/hostname"}
            if w == "http":
                status, body = http_call(ti, t, args)
                assert status == 200
                seen.append((w, body["call_id"]))
            else:
                r = run(lambda t=t, args=args: call(m.url, t, args))  # type: ignore[misc]
                assert not isinstance(r, str)
                seen.append((w, m.records()[-1]["call_id"]))
        for _, cid in seen:
            assert ti.wait_call(cid) is not None
        engine.finish()
    assert [ev.call_id for ev in probe.injected] == [
        [cid for (w, cid), (_, t) in zip(seen, calls, strict=True) if t == tool][nth - 1]
    ]
    assert probe.injected[0].ordinal == nth and probe.injected[0].phase is phase
    expect = {t: sum(1 for _, x in calls if x == t) for _, t in calls}
    assert engine.counts() == dict(sorted(expect.items()))


def test_the_trigger_record_names_the_mcp_call(
    server: McpToolServer, ti: ToolInterposer, journal: Journal
) -> None:
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    trigger = {"tool": "exec", "ordinal": 2, "phase": "dispatched"}
    engine.schedule("p", SIGKILL_MID_TOOL_CALL, trigger, Probe())
    engine.arm()
    ti.sink = engine
    assert http_call(ti, "exec", {"argv": ["true"]})[0] == 200
    run(lambda: call(server.url, "exec", {"argv": ["true"]}))
    engine.finish()
    (reached,) = [
        e.record for e in read_journal(journal.path) if isinstance(e.record, TriggerReached)
    ]
    assert reached.call_id.startswith("mcp-") and reached.ordinal == 2 and reached.tool == "exec"


# --- directives: the response is really withheld, the call really held ------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("phase", [Phase.RECEIVED, Phase.EFFECT_DONE])
def test_a_drop_directive_delivers_no_mcp_response(
    sandbox: LocalSandbox, mode: str, phase: Phase
) -> None:
    directive = (
        Directive.CLOSE_WITHOUT_RESPONSE if phase is Phase.RECEIVED else Directive.DROP_RESPONSE
    )
    sink = RecordingSink(at=("write_file", phase), directive=directive)
    with ToolInterposer(sandbox, sink=sink) as ti, McpToolServer(ti) as m:
        got = run(lambda: call(m.url, "write_file", {"path": "/d.txt", "content": "x"}, mode))
        obs = ti.wait_call(m.records()[0]["call_id"])
        (rec,) = m.records()  # once the call has settled
        after = run(lambda: call(m.url, "read_file", {"path": "/d.txt"}, mode))
    assert isinstance(got, str) and got.startswith("transport: "), got
    assert "disconnected without sending a response" in got or "Connection closed" in got, got
    assert obs is not None and obs["outcome"] == (
        "closed" if phase is Phase.RECEIVED else "dropped"
    )
    assert rec["response"] == "aborted"
    assert sink.completed == [rec["call_id"]]  # completed once the connection was cut
    # the effect happened (or not) as the phase says; only the response was withheld
    if phase is Phase.EFFECT_DONE:
        assert not isinstance(after, str) and after.structured_content == {"content": "x"}
    else:
        assert not isinstance(after, str) and after.is_error


def test_a_close_after_the_response_cuts_the_connection_once_delivered(
    sandbox: LocalSandbox,
) -> None:
    sink = RecordingSink(
        at=("exec", Phase.RESPONSE_SENT), directive=Directive.CLOSE_WITHOUT_RESPONSE
    )
    with ToolInterposer(sandbox, sink=sink) as ti, McpToolServer(ti) as m:

        async def go() -> Any:
            async with Client(m.url, mode="legacy") as c:
                await c.list_tools()  # else the client lists them right after the result, and
                # that request races the close (a next request on the connection would, over MCP
                # as over the HTTP API)
                return await c.call_tool("exec", {"argv": ["echo", "late"]})

        got: Any = None
        with contextlib.suppress(Exception):  # closing the client on a closed connection
            got = run(go)
        assert ti.wait_call(m.records()[0]["call_id"]) is not None
        (rec,) = m.records()  # once the call has settled
    assert not isinstance(got, str) and got.structured_content["stdout"] == "late\n"  # delivered
    assert rec["response"] == "sent_then_closed" and sink.completed == [rec["call_id"]]


def test_response_sent_is_reported_after_the_client_has_the_response(sandbox: LocalSandbox) -> None:
    # The sink holds `response_sent` until the client has its result: if the event came before
    # the response was written, the client could never get it and the test would time out.
    release = threading.Event()
    sink = RecordingSink(at=("exec", Phase.RESPONSE_SENT), hold=release)
    with ToolInterposer(sandbox, sink=sink) as ti, McpToolServer(ti) as m:

        async def go() -> Any:
            async with Client(m.url, mode="legacy") as c:
                r = await c.call_tool("exec", {"argv": ["echo", "ok"]})
                assert sink.held.is_set()
                release.set()
                return r

        r = run(go)
        (rec,) = m.records()
        assert ti.wait_call(rec["call_id"]) is not None
    assert r.structured_content["stdout"] == "ok\n"
    assert sink.events[-1][2] is Phase.RESPONSE_SENT


def test_a_held_call_stays_in_flight_until_released(sandbox: LocalSandbox) -> None:
    release = threading.Event()
    sink = RecordingSink(at=("exec", Phase.DISPATCHED), hold=release)
    with ToolInterposer(sandbox, sink=sink) as ti, McpToolServer(ti) as m:
        out: list[Any] = []
        t = threading.Thread(
            target=lambda: out.append(run(lambda: call(m.url, "exec", {"argv": ["true"]})))
        )
        t.start()
        assert sink.held.wait(20)
        (cid,) = ti.in_flight()
        assert cid.startswith("mcp-") and ti.call_observation(cid)["in_flight"] is True
        assert not out  # the agent is still waiting
        release.set()
        t.join(30)
    assert out and not isinstance(out[0], str) and not out[0].is_error


# --- sessions and sandbox restarts ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_restart_is_a_tool_error_naming_it_then_the_agent_reattaches(
    server: McpToolServer, ti: ToolInterposer, mode: str
) -> None:
    async def go() -> list[Any]:
        async with Client(server.url, mode=mode) as c:
            first = await c.call_tool("exec", {"argv": ["true"]})
            ti.bump_epoch()  # what the sandbox_restart actuator does after the restart
            return [first, await c.call_tool("exec", {"argv": ["true"]}),
                    await c.call_tool("exec", {"argv": ["true"]})]  # fmt: skip

    first, stale, again = run(go)
    assert not first.is_error and not again.is_error
    assert stale.is_error
    sc = stale.structured_content
    assert sc["error"] == "stale_session" and (sc["session_epoch"], sc["epoch"]) == (1, 2)
    assert "sandbox restarted" in stale.content[0].text and "epoch 1" in stale.content[0].text
    assert ti.counts() == {"exec": 2}  # the stale call never reached the sandbox
    obs = ti.session_observation(1)
    assert obs["stale_session_failed"] and obs["reattached"] and obs["new_epoch"] == 2
    reattach = next(a for a in ti._attaches if a.session_id == obs["reattach_session_id"])
    assert reattach.previous_session_id == ti._stale[0].session_id


def test_a_restart_under_a_call_discards_its_result(sandbox: LocalSandbox) -> None:
    class Bump(RecordingSink):
        ti: ToolInterposer

        def event(
            self, source: str, tool: str, phase: Phase, call_id: str, context: Any = None
        ) -> Any:
            if phase is Phase.DISPATCHED and tool == "write_file":
                self.ti.bump_epoch()  # the sandbox restarts while the call runs
            return super().event(source, tool, phase, call_id, context)

    sink = Bump()
    with ToolInterposer(sandbox, sink=sink) as ti, McpToolServer(ti) as m:
        sink.ti = ti
        r = run(lambda: call(m.url, "write_file", {"path": "/x", "content": "1"}))
    assert not isinstance(r, str) and r.is_error
    assert "restarted while this call ran" in r.structured_content["message"]


def test_each_mcp_session_has_its_own_interposer_session(
    server: McpToolServer, ti: ToolInterposer
) -> None:
    async def go() -> list[Any]:
        async with Client(server.url, mode="legacy") as a, Client(server.url, mode="legacy") as b:
            await a.call_tool("exec", {"argv": ["true"]})
            await b.call_tool("exec", {"argv": ["true"]})
            ti.bump_epoch()
            return [await a.call_tool("exec", {"argv": ["true"]}),
                    await b.call_tool("exec", {"argv": ["true"]})]  # fmt: skip

    ra, rb = run(go)
    assert ra.is_error and rb.is_error  # each session learns of the restart itself
    assert len({s.session_id for s in ti._stale}) == 2
    assert len({c.session_id for c in ti._calls.values()}) == 2
