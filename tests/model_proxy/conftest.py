"""Model proxy test helpers: a real local HTTP upstream that speaks the three dialects, and one
conversation per dialect as both an SDK call and a raw request body.

The fake upstream is a real server on 127.0.0.1 (stdlib ThreadingHTTPServer). It checks the
provider's credential header against the host key it was given (401 otherwise), records the
headers it saw, and answers with a counter in the text, so two identical requests get two
different answers (occurrence indexing is visible). A user message containing `ECHO-KEY`
makes it echo the credential it received (the redaction test).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx
import openai
import pytest

from runner.runtime.cassettes.format import Cassette, Dialect, ScriptedTurn, ToolCall
from runner.runtime.interposers.modelproxy import ModelProxy, Upstream
from runner.runtime.interposers.modelproxy import dialects as D

UPSTREAM_KEY = "sk-host-secret-7f3a9c1e5b2d4a6f8e0c"  # only the host knows it
KEY_ENV = "AFB_TEST_MODEL_KEY"
DIALECTS: tuple[Dialect, ...] = ("openai-chat", "openai-responses", "anthropic-messages")
PATH = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic-messages": "/v1/messages",
}


@dataclass
class FakeUpstream:
    address: tuple[str, int]
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    seen_paths: list[str] = field(default_factory=list)
    count: int = 0
    fail_with: int | None = None  # answer every call with this status

    def upstreams(self) -> dict[str, Upstream]:
        host, port = self.address
        return {
            "openai": Upstream("openai", f"http://{host}:{port}/v1", KEY_ENV),
            "anthropic": Upstream("anthropic", f"http://{host}:{port}", KEY_ENV),
        }


class _UpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        up: FakeUpstream = self.server.up
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        up.seen_headers.append(headers)
        up.seen_paths.append(self.path)
        dialect = D.dialect_of(self.path)
        cred = headers.get("authorization", "").removeprefix("Bearer ")
        if dialect == "anthropic-messages":
            cred = headers.get("x-api-key", "")
        if up.fail_with is not None:
            status, ctype, data = up.fail_with, "application/json", b'{"error":"overloaded"}'
        elif cred != UPSTREAM_KEY or dialect is None:
            status, ctype, data = 401, "application/json", b'{"error":"bad key"}'
        else:
            body = json.loads(raw)
            up.count += 1
            text = f"upstream answer {up.count}"
            if "ECHO-KEY" in json.dumps(body):
                text += f" (you sent {cred})"
            turn = ScriptedTurn(text=text, input_tokens=11, output_tokens=7)
            ctype, data = D.render(dialect, 0, turn, body, "fake")
            status = 200
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serve_upstream() -> Iterator[FakeUpstream]:
    """A FakeUpstream listening on 127.0.0.1 for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _UpHandler)
    server.daemon_threads = True
    up = FakeUpstream(server.server_address[:2])  # type: ignore[arg-type]
    server.up = up  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield up
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with serve_upstream() as up:
        yield up


@pytest.fixture
def host_env() -> dict[str, str]:
    return {KEY_ENV: UPSTREAM_KEY}


SCRIPT = Cassette(
    version=1,
    kind="scripted",
    turns=(
        ScriptedTurn(
            text="Let me look.", tool_calls=(ToolCall(id="call_a1", name="bash", arguments={}),)
        ),
        ScriptedTurn(
            tool_calls=(
                ToolCall(id="call_b1", name="bash", arguments={"cmd": "ls -la"}),
                ToolCall(id="call_b2", name="submit", arguments={"ok": True}),
            )
        ),
        ScriptedTurn(text="All done."),
    ),
)


def conversation(dialect: Dialect, turns_done: int, *, stream: bool, note: str = "hi") -> dict:
    """A request body whose conversation already holds `turns_done` assistant turns."""
    if dialect == "openai-responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": note}]
        for i in range(turns_done):
            items.append({"type": "function_call", "call_id": f"x{i}", "name": "bash"})
            items[-1]["arguments"] = "{}"
            items.append({"type": "function_call_output", "call_id": f"x{i}", "output": "ok"})
        return {"model": "gpt-test", "input": items, "stream": stream}
    msgs: list[dict[str, Any]] = [{"role": "user", "content": note}]
    for i in range(turns_done):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": "ok"}]
    body: dict[str, Any] = {"model": "m-test", "messages": msgs, "stream": stream}
    if dialect == "anthropic-messages":
        body["max_tokens"] = 256
    return body


def sdk_call(proxy: ModelProxy, dialect: Dialect, body: dict[str, Any]) -> str:
    """Send `body` with the real SDK (streaming or not) and return the assistant's text plus
    tool calls, as parsed by the SDK."""
    urls = proxy.base_urls()
    kw = {k: v for k, v in body.items() if k != "stream"}
    stream = body.get("stream") is True
    if dialect == "anthropic-messages":
        ac = anthropic.Anthropic(
            base_url=urls["ANTHROPIC_BASE_URL"], api_key="dummy-subject-key", max_retries=0
        )
        if stream:
            with ac.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = ac.messages.create(**kw)
        parts = [b.text if b.type == "text" else f"{b.name}{b.input}" for b in msg.content]
        return "|".join(parts)
    oc = openai.OpenAI(base_url=urls["OPENAI_BASE_URL"], api_key="dummy-subject-key", max_retries=0)
    if dialect == "openai-chat":
        if stream:
            with oc.chat.completions.stream(**kw) as s:
                m = s.get_final_completion().choices[0].message
        else:
            m = oc.chat.completions.create(**kw).choices[0].message
        calls = [f"{c.function.name}{c.function.arguments}" for c in m.tool_calls or []]
        return "|".join([m.content or "", *calls])
    if stream:
        with oc.responses.stream(**kw) as s:
            r = s.get_final_response()
    else:
        r = oc.responses.create(**kw)
    calls = [f"{o.name}{o.arguments}" for o in r.output if o.type == "function_call"]
    return "|".join([r.output_text, *calls])


def raw_call(proxy: ModelProxy, dialect: Dialect, body: dict[str, Any]) -> httpx.Response:
    host, port = proxy.address
    return httpx.post(
        f"http://{host}:{port}{PATH[dialect]}",
        json=body,
        headers={"authorization": "Bearer dummy-subject-key", "x-api-key": "dummy-subject-key"},
        timeout=30,
    )
