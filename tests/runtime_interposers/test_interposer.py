"""Tool interposer: tools, sessions with epochs, call counts, semantic events, drop directive."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.core.types import Phase
from runner.runtime.events import Decision, Directive
from runner.runtime.interposers.tools import ToolInterposer
from tests.runtime_interposers.conftest import LocalSandbox, request


class RecordingSink:
    """Event sink that records every event and answers with a configurable directive."""

    def __init__(self, drop_at: tuple[str, Phase] | None = None) -> None:
        self.drop_at = drop_at
        self.events: list[tuple[str, str, Phase, str]] = []
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
        if self.drop_at == (tool, phase):
            return Decision(Directive.DROP_RESPONSE)
        return Decision()


@pytest.fixture
def sandbox(run_dir: Path) -> LocalSandbox:
    root = run_dir / "sandbox"
    root.mkdir()
    return LocalSandbox(root)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def ti(sandbox: LocalSandbox, sink: RecordingSink) -> Iterator[ToolInterposer]:
    with ToolInterposer(sandbox, sink=sink, run_tests_argv=["sh", "-c", "echo ran; exit 3"]) as t:
        yield t


def attach(ti: ToolInterposer, previous: str | None = None) -> dict[str, Any]:
    body = {"previous_session_id": previous} if previous else {}
    status, out = request(ti.address, "POST", "/session", body)
    assert status == 200
    return out


def call(ti: ToolInterposer, sid: str, tool: str, args: dict[str, Any], cid: str = "") -> Any:
    return request(ti.address, "POST", "/call", {"session_id": sid, "call_id": cid or None,
                                                  "tool": tool, "args": args})  # fmt: skip


def test_each_tool(ti: ToolInterposer, sandbox: LocalSandbox) -> None:
    sid = attach(ti)["session_id"]
    st, out = call(ti, sid, "write_file", {"path": "/w/a.txt", "content": "héllo\n"}, "w1")
    assert st == 200 and out == {"call_id": "w1", "tool": "write_file", "ok": True,
                                 "result": {"bytes": 7}}  # fmt: skip
    assert (sandbox.root / "w/a.txt").read_text() == "héllo\n"
    st, out = call(ti, sid, "read_file", {"path": "/w/a.txt"})
    assert st == 200 and out["ok"] and out["result"] == {"content": "héllo\n"}
    st, out = call(ti, sid, "exec", {"argv": ["cat"], "stdin": "piped"})
    assert out["result"] == {"exit_code": 0, "stdout": "piped", "stderr": ""}
    st, out = call(ti, sid, "exec", {"argv": ["sh", "-c", "echo err >&2; exit 5"]})
    assert out["result"]["exit_code"] == 5 and out["result"]["stderr"] == "err\n"
    st, out = call(ti, sid, "run_tests", {})
    assert out["result"]["passed"] is False and out["result"]["stdout"] == "ran\n"
    st, out = call(ti, sid, "run_tests", {"argv": ["true"]})
    assert out["result"]["passed"] is True
    st, out = call(ti, sid, "read_file", {"path": "/missing"})
    assert st == 200 and out["ok"] is False and "FileNotFoundError" in out["error"]
    assert ti.counts() == {"exec": 2, "read_file": 2, "run_tests": 2, "write_file": 1}


def test_bad_requests_do_not_count(ti: ToolInterposer) -> None:
    sid = attach(ti)["session_id"]
    assert call(ti, sid, "rm_rf", {})[0] == 400
    assert call(ti, sid, "exec", {"argv": "ls"})[0] == 400
    assert call(ti, "no-such-session", "exec", {"argv": ["true"]}) == (
        404,
        {"error": "unknown_session"},
    )
    assert ti.counts() == {}


def test_stale_session_fails_visibly_then_reattach(ti: ToolInterposer) -> None:
    s1 = attach(ti)
    assert s1["epoch"] == 1
    assert call(ti, s1["session_id"], "exec", {"argv": ["true"]})[0] == 200
    assert ti.session_observation(1)["stale_session_failed"] is False

    assert ti.bump_epoch() == 2  # the harness restarted the sandbox
    st, out = call(ti, s1["session_id"], "exec", {"argv": ["true"]}, "stale-1")
    assert st == 409 and out == {"error": "stale_session", "session_epoch": 1, "epoch": 2}
    mid = ti.session_observation(1)
    assert mid["stale_session_failed"] is True and mid["reattached"] is False

    s2 = attach(ti, previous=s1["session_id"])
    assert s2["epoch"] == 2 and s2["session_id"] != s1["session_id"]
    assert call(ti, s2["session_id"], "exec", {"argv": ["true"]})[0] == 200
    obs = ti.session_observation(1)
    assert obs == {
        "collector": "tool_interposer",
        "old_epoch": 1,
        "new_epoch": 2,
        "stale_session_failed": True,
        "reattached": True,
        "stale_call_id": "stale-1",
        "reattach_session_id": s2["session_id"],
    }
    assert ti.counts() == {"exec": 2}  # the stale call never reached the sandbox


def test_reattach_without_a_stale_failure_is_not_a_witness(ti: ToolInterposer) -> None:
    s1 = attach(ti)
    ti.bump_epoch()
    attach(ti, previous=s1["session_id"])  # pre-emptive: the boundary was never observed
    obs = ti.session_observation(1)
    assert obs["stale_session_failed"] is False and obs["reattached"] is False


def test_semantic_events_in_order(ti: ToolInterposer, sink: RecordingSink) -> None:
    sid = attach(ti)["session_id"]
    call(ti, sid, "exec", {"argv": ["true"]}, "e1")
    obs = ti.wait_call("e1")  # response_sent is reported after the subject has the bytes
    assert obs is not None and sink.events == [("tool_interposer", "exec", p, "e1") for p in Phase]
    assert obs["collector"] == "tool_interposer" and obs["in_flight"] is False
    assert obs["phases"] == [p.value for p in Phase] and obs["outcome"] == "ok"


def test_drop_directive_closes_without_response(sandbox: LocalSandbox) -> None:
    sink = RecordingSink(drop_at=("write_file", Phase.EFFECT_DONE))
    with ToolInterposer(sandbox, sink=sink) as ti:
        sid = attach(ti)["session_id"]
        conn = http.client.HTTPConnection(*ti.address, timeout=5)
        body = {"session_id": sid, "call_id": "d1", "tool": "write_file",
                "args": {"path": "/x", "content": "done"}}  # fmt: skip
        conn.request("POST", "/call", body=json.dumps(body))
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            conn.getresponse()
        conn.close()
        assert (sandbox.root / "x").read_text() == "done"  # the effect happened
        assert (ti.wait_call("d1") or {})["outcome"] == "dropped"
        assert [e[2] for e in sink.events] == [Phase.RECEIVED, Phase.DISPATCHED, Phase.EFFECT_DONE]
