"""`submission_status` (contract I2): a read-only tool answered from the destination's ledger for
the attempt's scope, on the tool interposer's HTTP API and over MCP, an ordinary tool for
triggers. Real interposer, egress proxy, destination and MCP client; the sandbox is a local
stand-in (the tool runs nothing in it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from runner.evaluator.core.types import Phase
from runner.evaluator.protocol.spec import Tool
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from runner.runtime.interposers.mcp_tools import Effects, McpToolServer
from runner.runtime.interposers.tools import STATUS_TOOL, ToolInterposer
from tests.mcp.helpers import RecordingSink, call, run
from tests.runtime_interposers.conftest import LocalSandbox, destination, effect, request, run_dir  # noqa: F401

SCOPE = "run/attempt-1"
OTHER = "run/attempt-2"
ROUTES = {("POST", "/effects"): "submit_patch"}
SPEC_TOOLS = [
    Tool(name="read_file"),
    Tool(name="exec"),
    Tool(name="submit_patch", irreversible=True),
    Tool(name=STATUS_TOOL),
]


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def ti(
    run_dir: Path,  # noqa: F811
    destination: DestinationService,  # noqa: F811
    sink: RecordingSink,
) -> Iterator[ToolInterposer]:
    (run_dir / "sandbox").mkdir()
    with ToolInterposer(LocalSandbox(run_dir / "sandbox"), sink=sink) as t:
        t.set_status(lambda: destination.ledger.status(SCOPE))  # as the attempt wires it
        yield t


def status_over_http(ti: ToolInterposer) -> dict[str, Any]:
    sid = request(ti.address, "POST", "/session", {})[1]["session_id"]
    code, body = request(
        ti.address, "POST", "/call", {"session_id": sid, "tool": STATUS_TOOL, "args": {}}
    )
    assert code == 200 and body["ok"] is True, body
    return dict(body["result"])


def test_http_committed_false_before_and_true_after_a_submit(
    ti: ToolInterposer,
    destination: DestinationService,  # noqa: F811
    sink: RecordingSink,
) -> None:
    assert status_over_http(ti) == {"scope": SCOPE, "committed": False, "effects": 0,
                                    "effect_ids": []}  # fmt: skip
    request(destination.address, "POST", "/effects", effect(OTHER))  # another attempt's scope
    assert status_over_http(ti)["committed"] is False
    code, made = request(destination.address, "POST", "/effects", effect(SCOPE))
    assert code == 201
    after = status_over_http(ti)
    assert after == {"scope": SCOPE, "committed": True, "effects": 1,
                     "effect_ids": [made["effect_id"]]}  # fmt: skip
    request(destination.address, "POST", "/effects", effect(SCOPE, 1))  # a duplicate shows
    assert status_over_http(ti)["effects"] == 2
    # an ordinary tool for triggers: every phase reported under its name, counted per tool
    phases = [p for _, tool, p, _ in sink.events if tool == STATUS_TOOL]
    assert phases[:4] == [Phase.RECEIVED, Phase.DISPATCHED, Phase.EFFECT_DONE, Phase.RESPONSE_SENT]
    assert ti.counts()[STATUS_TOOL] == 4


def test_http_it_is_listed_takes_no_arguments_and_writes_nothing(
    ti: ToolInterposer,
    destination: DestinationService,  # noqa: F811
) -> None:
    code, listing = request(ti.address, "GET", "/tools")
    assert code == 200
    tools = {t["name"]: t["read_only"] for t in listing["tools"]}
    assert tools[STATUS_TOOL] is True and tools["exec"] is False
    sid = request(ti.address, "POST", "/session", {})[1]["session_id"]
    peek = {"session_id": sid, "tool": STATUS_TOOL, "args": {"scope": OTHER}}
    code, body = request(ti.address, "POST", "/call", peek)
    assert code == 400 and "no arguments" in body["message"]  # no peeking at another scope
    for _ in range(3):
        status_over_http(ti)
    assert destination.ledger.all() == []  # read-only: asking commits nothing


def test_without_a_status_source_the_tool_is_not_served(run_dir: Path) -> None:  # noqa: F811
    (run_dir / "bare").mkdir()
    with ToolInterposer(LocalSandbox(run_dir / "bare")) as ti:
        assert STATUS_TOOL not in [
            t["name"] for t in request(ti.address, "GET", "/tools")[1]["tools"]
        ]
        sid = request(ti.address, "POST", "/session", {})[1]["session_id"]
        code, _ = request(ti.address, "POST", "/call",
                          {"session_id": sid, "tool": STATUS_TOOL, "args": {}})  # fmt: skip
        assert code == 400


def _text(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    return dict(json.loads(result.content[0].text))


def test_mcp_committed_false_before_and_true_after_a_submit_through_mcp(
    ti: ToolInterposer,
    destination: DestinationService,  # noqa: F811
    sink: RecordingSink,
) -> None:
    with (
        EgressProxy(destination.address, sink=sink) as proxy,
        McpToolServer(
            ti, tools=SPEC_TOOLS, effects=Effects.from_proxy_tools(proxy.address, SCOPE, ROUTES)
        ) as m,
    ):

        async def listing() -> Any:
            async with Client(m.url, mode="legacy") as c:
                return (await c.list_tools()).tools

        tools = {t.name: t for t in run(listing)}
        assert STATUS_TOOL in tools
        ann = tools[STATUS_TOOL].annotations
        assert ann is not None and ann.read_only_hint is True and not ann.destructive_hint
        before = _text(run(lambda: call(m.url, STATUS_TOOL, {})))
        assert before == {"scope": SCOPE, "committed": False, "effects": 0, "effect_ids": []}
        submitted = run(lambda: call(m.url, "submit_patch", {"payload": {"patch": "x"}}))
        assert not submitted.is_error, submitted
        after = _text(run(lambda: call(m.url, STATUS_TOOL, {})))
        assert after["committed"] is True and after["effects"] == 1
        assert after["effect_ids"] == [i["effect_id"] for i in destination.ledger.query(SCOPE)]
    # the same events and ordinals as over HTTP: the interposer carried both MCP calls
    assert ti.counts()[STATUS_TOOL] == 2
    assert [p for _, t, p, _ in sink.events if t == STATUS_TOOL].count(Phase.RECEIVED) == 2


# --- mini-swe-agent: the bash command `afb-submission-status` is the tool ------------------------

STATUS_PROBE = """
import json, sys
from afb_msa.environment import AfbSandboxEnvironment
env = AfbSandboxEnvironment()
print(json.dumps([env.execute({"command": c}) for c in sys.argv[1:]]))
"""


def test_mini_swe_agents_status_command_is_the_tool(
    ti: ToolInterposer,
    destination: DestinationService,  # noqa: F811
    sink: RecordingSink,
    run_dir: Path,  # noqa: F811
) -> None:
    """afb_msa, in mini-swe-agent's own built environment (a real process), maps the command to
    `submission_status` on the interposer: committed false, then true after a commit."""
    import subprocess

    from runner.evaluator.protocol.specload import load_spec
    from runner.runtime.subjects.environment import ensure_built
    from runner.runtime.subjects.mini_swe_agent import MiniSweAgentConfig

    agents = Path(__file__).resolve().parents[2] / "specs" / "swe-lite-agents.toml"
    (mini,) = [s for s in load_spec(agents).subjects if s.id == "mini-swe-agent-careful"]
    built = ensure_built(MiniSweAgentConfig.model_validate(mini.config).environment)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(built.project),
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "HOME": str(run_dir),
        "AFB_INTERPOSER_URL": "http://{}:{}".format(*ti.address),
        "AFB_EGRESS_URL": "http://{}:{}".format(*destination.address),
        "AFB_SCOPE": SCOPE,
        "AFB_TASK_ID": "t",
    }

    def ask(*commands: str) -> list[dict[str, Any]]:
        out = subprocess.run(
            [str(built.python), "-c", STATUS_PROBE, *commands],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return list(json.loads(out.stdout.strip().splitlines()[-1]))

    (before,) = ask("afb-submission-status")
    assert before["returncode"] == 0, before
    assert json.loads(before["output"]) == {"scope": SCOPE, "committed": False, "effects": 0,
                                            "effect_ids": []}  # fmt: skip
    request(destination.address, "POST", "/effects", effect(SCOPE))
    after, echoed = ask("  afb-submission-status\n", "echo afb-submission-status")
    assert json.loads(after["output"])["committed"] is True
    assert echoed["output"].strip() == "afb-submission-status"  # only the bare command maps
    assert ti.counts() == {STATUS_TOOL: 2, "exec": 1}
