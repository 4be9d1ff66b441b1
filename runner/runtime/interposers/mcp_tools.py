"""MCP tool server: the tool interposer's tools, and the spec's irreversible tools, over MCP.

Why: MCP is the one tool seam real agents call over the wire, so a subject that speaks MCP must
meet the same semantic checkpoints as one speaking the interposer's HTTP API. This module is only
a transport: the official `mcp` SDK (low-level `Server` + its Streamable HTTP session manager,
JSON responses) under uvicorn on a thread, in front of the same dispatch paths.

- Sandbox tools (`read_file`, `write_file`, `exec`, `run_tests`), and the read-only
  `submission_status` when the spec lists it, drive the interposer's own
  `ToolCall` (`ToolInterposer.open_call`): the same events (`received`, `dispatched`,
  `effect_done`, `response_sent`) under the same source (`tool_interposer`), so one ordinal per
  tool counts MCP and HTTP calls alike, and the same call records feed the witnesses.
  `response_sent` is reported once the JSON-RPC response's last byte was handed to the socket.
- Effect tools (the spec's irreversible tools, e.g. swe-lite's `submit_patch`) are sent as the
  HTTP request they stand for through the egress proxy (`X-AFB-Call-Id` = the MCP call id), so
  the proxy reports their events and keeps the byte counts the lost_response witness reads, and
  the destination's ledger names the call. Whatever the proxy withholds from this server is
  withheld from the agent: on a transport failure the agent's HTTP connection is aborted
  (zero response bytes) *before* this server closes its proxy connection, so the proxy's
  "subject end" is observed after the agent's response was lost.
- A directive to deliver nothing (drop / close) aborts the agent's HTTP connection: the MCP
  response is never written. `sigkill_mid_tool_call` holds the call in its worker thread.

Sessions: an MCP session (`Mcp-Session-Id`; every sessionless 2026-07-28 request shares one
binding) is bound lazily, at its first sandbox tool call, to an interposer session on the
current epoch. After a sandbox restart the next call on an old binding fails as a tool error
(`isError`, `stale_session`, naming the restart) and is recorded as the stale failure; the
binding is dropped, so the agent's next call reattaches (a new interposer session whose
`previous_session_id` is the stale one) -- the agent reattaches by carrying on.

The tools' names, schemas and result shapes are in `mcp_catalogue`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from runner.runtime.interposers import mcp_catalogue as cat
from runner.runtime.interposers.mcp_catalogue import EffectRoute, Effects, ToolDecl
from runner.runtime.interposers.tools import BadToolCall, Reply, ToolCall, ToolInterposer

__all__ = ["EffectRoute", "Effects", "McpCallRecord", "McpToolServer", "ToolDecl"]

EXCHANGE_KEY = "afb.mcp.exchange"  # the ASGI scope key of this request's `_Exchange`
SESSION_HEADER = "mcp-session-id"
SESSIONLESS = ""  # the binding key of requests without a session (the 2026-07-28 wire)
CALL_ID_HEADER = "X-AFB-Call-Id"


@dataclass
class McpCallRecord:
    call_id: str
    tool: str
    mcp_session: str
    route: str  # "interposer" | "egress_proxy" | "query"
    outcome: str = "pending"  # ok|tool_error|stale_session|bad_arguments|dropped|lost|effect_error
    response: str = "pending"  # sent | aborted (no byte) | sent_then_closed | pending
    at_ns: str = field(default_factory=lambda: str(time.time_ns()))


# --- the HTTP exchange under one MCP request ------------------------------------------------------


class _Exchange:
    """One HTTP request to the MCP endpoint: its connection (to abort it) and what runs once
    its response has been written (`response_sent`, settling)."""

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.aborted = False
        self.done = False  # the response's last byte was written, or the request ended
        self._after: list[Callable[[], Awaitable[None]]] = []

    def abort(self) -> None:
        """Cut the subject's connection now, writing nothing more (event-loop thread)."""
        self.aborted = True
        if not self.transport.is_closing():
            # close() would flush what is buffered; abort() discards it
            self.transport.abort()  # type: ignore[attr-defined]

    def close_after_response(self) -> None:
        """End the connection after what was written (as the HTTP API's drop after a reply):
        shut both directions down, so the response is delivered and then the subject sees EOF;
        the event loop then sees the end of the connection and closes it."""
        self.aborted = True  # nothing more is written on it
        sock = self.transport.get_extra_info("socket")
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            self.transport.close()

    async def after(self, fn: Callable[[], Awaitable[None]]) -> None:
        if self.done:
            await fn()
        else:
            self._after.append(fn)

    async def run_after(self) -> None:
        self.done = True
        todo, self._after = self._after, []
        for fn in todo:
            await fn()


class _App:
    """The ASGI app: one path, each request tagged with its `_Exchange`, responses watched."""

    def __init__(self, owner: McpToolServer) -> None:
        self.owner = owner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != self.owner.path:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        transport = self.owner._transport_of(scope)
        if transport is None:  # without it no response could be withheld: refuse to serve
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"no connection handle"})
            return
        ex = _Exchange(transport)
        scope[EXCHANGE_KEY] = ex

        async def watched(message: Any) -> None:
            if ex.aborted:
                return  # nothing more reaches the subject
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await ex.run_after()

        try:
            await self.owner.manager.handle_request(scope, receive, watched)
        finally:
            with anyio.CancelScope(shield=True):
                await ex.run_after()  # the response could not be written: settle all the same


# --- the server -------------------------------------------------------------------------------


class McpToolServer:
    """`with McpToolServer(interposer, effects=...) as m: m.url` -> "http://host:port/mcp".

    `tools`: the spec's `[[tools]]`; each must be a sandbox tool, an effect route's tool, or
    named in `elsewhere` (tools another interposer serves, e.g. model calls through the model
    proxy: not MCP tools); ValueError otherwise. Default: the four sandbox tools plus every
    effect route.
    """

    def __init__(
        self,
        interposer: ToolInterposer,
        *,
        tools: Sequence[ToolDecl] | None = None,
        effects: Effects | None = None,
        elsewhere: Collection[str] = (),
        host: str | None = None,
        port: int = 0,
        path: str = "/mcp",
    ) -> None:
        self.interposer = interposer
        self.effects = effects
        self.host = host if host is not None else _default_host(interposer)
        self.port = port
        self.path = "/" + path.strip("/")
        self._routes = {r.tool: r for r in (effects.routes if effects else ())}
        served = [d for d in tools if d.name not in elsewhere] if tools is not None else None
        self._tools = cat.catalogue(served, effects)
        self._schemas = {t.name: t.input_schema for t in self._tools}
        self._lock = threading.Lock()
        self._bindings: dict[str, str] = {}  # MCP session key -> interposer session id
        self._last: dict[str, str] = {}  # MCP session key -> its last interposer session
        self._records: dict[str, McpCallRecord] = {}
        self.server: Server[Any] = Server(
            "afb-tools",
            version="1",
            instructions="Sandbox tools and the task's irreversible tools of one attempt.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=self._schemas.get,
        )
        self.server.middleware = []  # no tracing span per message
        self.manager: StreamableHTTPSessionManager
        self._uv: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    # --- tool catalogue ---------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self._tools))

    # --- observations -----------------------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """This server's record of every MCP tool call (the interposer and the proxy keep their
        own records of the calls they carried)."""
        with self._lock:
            return [asdict(r) for r in self._records.values()]

    def _record(self, rec: McpCallRecord, **changes: str) -> None:
        with self._lock:
            for k, v in changes.items():
                setattr(rec, k, v)
            self._records[rec.call_id] = rec

    # --- sessions ---------------------------------------------------------------------------------

    def _session_for(self, key: str) -> str:
        with self._lock:
            sid = self._bindings.get(key)
            if sid is None:
                sid = self.interposer.attach(self._last.get(key)).session_id
                self._bindings[key] = self._last[key] = sid
            return sid

    def _unbind(self, key: str, sid: str) -> None:
        with self._lock:
            if self._bindings.get(key) == sid:
                del self._bindings[key]

    # --- calls ------------------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None) or {}
        ex = scope.get(EXCHANGE_KEY)
        if not isinstance(ex, _Exchange):
            raise MCPError(types.INTERNAL_ERROR, "tool call outside the MCP endpoint")
        key = request.headers.get(SESSION_HEADER, SESSIONLESS) if request is not None else ""
        name, args = params.name, dict(params.arguments or {})
        call_id = f"mcp-{secrets.token_hex(6)}"
        if name in self.interposer.tool_names() and name in self._schemas:
            # the sandbox tools and submission_status: the interposer's own call path
            return await self._sandbox_call(ex, key, call_id, name, args)
        if name in self._routes and name in self._schemas:
            return await self._effect_call(ex, key, call_id, self._routes[name], args)
        if self.effects is not None and name == self.effects.query_tool:
            return await self._query(key, call_id, name)
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}")

    async def _sandbox_call(
        self, ex: _Exchange, key: str, call_id: str, tool: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        rec = McpCallRecord(call_id, tool, key, "interposer")
        sid = self._session_for(key)
        try:
            opened = self.interposer.open_call(sid, call_id, tool, args)
        except BadToolCall as exc:
            self._record(rec, outcome="bad_arguments")
            return cat.error("bad_arguments", str(exc))
        if isinstance(opened, Reply):  # stale (or unknown) session: refused, never counted
            self._unbind(key, sid)
            self._record(rec, outcome="stale_session")
            return cat.stale(opened, ran=False)
        call = opened
        try:
            reply = await anyio.to_thread.run_sync(call.begin)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(call.finish)
            raise
        if reply is None:  # the directive: the subject gets no response at all
            ex.abort()
            self._record(rec, outcome="dropped", response="aborted")
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(call.finish)
            return cat.error("dropped", "no response")  # never written: the connection is gone
        outcome = "ok" if reply.body.get("ok") else "tool_error"
        if reply.status == 409:
            self._unbind(key, sid)
            outcome = "stale_session"
        self._record(rec, outcome=outcome)
        await ex.after(lambda: self._after_sent(ex, call, rec))
        return cat.stale(reply, ran=True) if reply.status == 409 else cat.tool_result(reply.body)

    async def _after_sent(self, ex: _Exchange, call: ToolCall, rec: McpCallRecord) -> None:
        """The response was written (or could not be): `response_sent`, then settle the call.
        A directive to close after the response cuts the connection before the call settles."""

        def sent_then_finish() -> None:
            try:
                if call.sent():
                    self._record(rec, response="aborted" if ex.aborted else "sent")
                else:
                    anyio.from_thread.run_sync(ex.close_after_response)
                    self._record(rec, response="sent_then_closed")
            finally:
                call.finish()

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(sent_then_finish)

    async def _effect_call(
        self, ex: _Exchange, key: str, call_id: str, route: EffectRoute, args: dict[str, Any]
    ) -> types.CallToolResult:
        assert self.effects is not None
        rec = McpCallRecord(call_id, route.tool, key, "egress_proxy")
        payload, idem, kind = args.get("payload"), args.get("idempotency_key"), args.get("kind")
        extra = sorted(set(args) - {"payload", "idempotency_key", "kind"})
        problem = (
            "payload must be an object"
            if not isinstance(payload, dict)
            else "idempotency_key must be a string"
            if idem is not None and not isinstance(idem, str)
            else "kind must be a non-empty string"
            if kind is not None and not (isinstance(kind, str) and kind)
            else f"unknown arguments {extra}"
            if extra
            else ""
        )
        if problem:
            self._record(rec, outcome="bad_arguments")
            return cat.error("bad_arguments", problem)
        body: dict[str, Any] = {
            "scope": self.effects.scope,
            "kind": kind or route.kind,
            "payload": payload,
        }
        if idem is not None:
            body["idempotency_key"] = idem
        effects = self.effects

        def post() -> tuple[int, bytes] | None:
            conn = http.client.HTTPConnection(*effects.egress, timeout=effects.timeout)
            try:
                conn.request(
                    route.method,
                    route.path,
                    body=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", CALL_ID_HEADER: call_id},
                )
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException):
                # The proxy delivered no (complete) response: neither does this server. The
                # agent's connection is cut before ours to the proxy ends (finally below).
                anyio.from_thread.run_sync(ex.abort)
                return None
            finally:
                conn.close()

        got = await anyio.to_thread.run_sync(post)
        if got is None:
            self._record(rec, outcome="lost", response="aborted")
            return cat.error("lost", "no response")  # never written: the connection is gone
        status, raw = got
        ok = 200 <= status < 300
        self._record(rec, outcome="ok" if ok else "effect_error")
        await ex.after(lambda: self._mark_sent(ex, rec))
        try:
            answer: Any = json.loads(raw)
        except ValueError:
            answer = {"raw": raw.decode("utf-8", "replace")}
        return cat.result({"status": status, "response": answer}, is_error=not ok)

    async def _query(self, key: str, call_id: str, name: str) -> types.CallToolResult:
        assert self.effects is not None
        rec = McpCallRecord(call_id, name, key, "query")
        effects = self.effects

        def get() -> tuple[int, bytes]:
            conn = http.client.HTTPConnection(*effects.egress, timeout=effects.timeout)
            try:
                conn.request("GET", f"/effects?scope={quote(effects.scope, safe='')}")
                resp = conn.getresponse()
                return resp.status, resp.read()
            finally:
                conn.close()

        try:
            status, raw = await anyio.to_thread.run_sync(get)
            answer = json.loads(raw)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self._record(rec, outcome="effect_error")
            return cat.error("query_failed", f"{type(exc).__name__}: {exc}")
        self._record(rec, outcome="ok" if status == 200 else "effect_error")
        return cat.result({"status": status, "response": answer}, is_error=status != 200)

    async def _mark_sent(self, ex: _Exchange, rec: McpCallRecord) -> None:
        self._record(rec, response="aborted" if ex.aborted else "sent")

    # --- lifecycle --------------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        if self._sock is None:
            raise RuntimeError("MCP tool server not started")
        addr = self._sock.getsockname()
        return str(addr[0]), int(addr[1])

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}{self.path}"

    def _transport_of(self, scope: Any) -> asyncio.BaseTransport | None:
        uv, client = self._uv, scope.get("client")
        if uv is None or client is None:
            return None
        peer = (str(client[0]), int(client[1]))
        for proto in list(uv.server_state.connections):
            if getattr(proto, "client", None) == peer:
                return getattr(proto, "transport", None)
        return None

    def start(self) -> McpToolServer:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP
        # (socket.create_server leaves it 0), and without it every response whose head and body
        # are written apart waits out the client's delayed ACK (~40 ms).
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        host, port = self.address
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{host}:{port}", f"{host}:*"],
            allowed_origins=[f"http://{host}:{port}"],
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            security_settings=security,
            session_idle_timeout=None,  # sessions end with the attempt
        )
        config = uvicorn.Config(
            _App(self),
            log_level="warning",
            access_log=False,
            lifespan="off",
            http="h11",
            loop="asyncio",
            timeout_keep_alive=600,
            timeout_graceful_shutdown=2,
        )
        self._uv = uv = uvicorn.Server(config)
        ready = threading.Event()

        async def main() -> None:
            async with self.manager.run():
                task = asyncio.create_task(uv.serve(sockets=[sock]))
                while not uv.started and not task.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await task

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:  # surfaced by start()
                self._failed = exc
            finally:
                ready.set()

        self._thread = threading.Thread(target=run, name="afb-mcp", daemon=True)
        self._thread.start()
        ready.wait(30)
        if not uv.started:
            self.stop()
            raise RuntimeError(f"MCP tool server did not start: {self._failed!r}")
        return self

    def stop(self) -> None:
        if self._uv is not None:
            self._uv.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._uv = None

    def __enter__(self) -> McpToolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _default_host(interposer: ToolInterposer) -> str:
    try:
        return interposer.address[0]  # beside the HTTP API, on the veth's host side
    except RuntimeError:
        return "127.0.0.1"
