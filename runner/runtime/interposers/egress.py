"""Egress proxy: subject -> proxy -> destination, HTTP/1.1 parsed with h11 on both sides.

Each subject connection gets its own upstream connection. The proxy counts the raw bytes on
each wire per exchange and per connection (request bytes from the subject and sent upstream,
response bytes received from upstream and delivered to the subject); these counts are the
`egress_proxy` collector's evidence, so they are counted where the socket calls happen.

Requests whose (method, path) is in the tool map are tool calls: the proxy reports `received`
(request fully read), `dispatched` (written upstream), `effect_done` (upstream response fully
read) and `response_sent` (written to the subject) to its event sink (the trigger engine), in
the connection's own thread, so a handler that blocks holds the call in flight. A directive
can make it deliver zero response bytes (`drop_response`) or close at once
(`close_without_response`): the proxy then half-closes the subject's connection and waits to
see the subject's side end (EOF or reset), which is the agent-side transport-failure evidence.

One module on purpose (~500 lines): the per-connection handler is one state machine over two h11
connections whose byte accounting must sit at the socket calls; split, the counts and the
phases it reports would live apart from the reads and writes they describe.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11

from runner.evaluator.core.types import Phase
from runner.runtime.events import Decision, Directive, EventSink, NullSink
from runner.runtime.interposers.serving import ServedInThread

SOURCE = "egress_proxy"
CALL_ID_HEADER = b"x-afb-call-id"
DEFAULT_TOOL_MAP: Mapping[tuple[str, str], str] = {("POST", "/effects"): "submit_patch"}
# Hop-by-hop headers (RFC 9110 §7.6.1): each side's h11 decides its own connection handling.
_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade"}
_RECV = 65536
MAX_BODY = 16 * 1024 * 1024

ToolMap = Mapping[tuple[str, str], str] | Callable[[str, str], str | None]


CLOSE_WATCH_S = 1.0  # how long a closed (not dropped) call waits to see the subject's end


@dataclass
class ExchangeRecord:
    """One request/response on a subject connection, as the proxy saw it."""

    index: int
    call_id: str
    call_id_assigned: bool  # the subject sent no X-AFB-Call-Id
    tool: str | None
    method: str
    target: str
    request_body: bytes = b""
    downstream_request_bytes: int = 0
    upstream_request_bytes: int = 0
    upstream_response_bytes: int = 0
    downstream_response_bytes: int = 0
    status: int | None = None
    phases: list[str] = field(default_factory=list)
    directive: str = Directive.CONTINUE.value
    outcome: str = "pending"  # delivered|dropped|closed|upstream_failed|downstream_failed|failed
    subject_end: str | None = None  # after the proxy half-closed: eof | reset | timeout


@dataclass
class ConnectionRecord:
    connection_id: str
    peer: str
    opened_ns: str
    closed_ns: str | None = None
    ended_by: str | None = None  # subject_eof | subject_reset | proxy_close | idle_timeout | ...
    downstream_request_bytes: int = 0
    upstream_request_bytes: int = 0
    upstream_response_bytes: int = 0
    downstream_response_bytes: int = 0
    exchanges: list[ExchangeRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for ex in d["exchanges"]:
            ex.pop("request_body")
        return d


class _Abort(Exception):
    """The exchange ended early; `outcome` says how."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class _SubjectGone(Exception):
    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class EgressProxy(ServedInThread["_Server"]):
    """`with EgressProxy(dest_addr, sink=engine) as p: p.address` -> (host, port)."""

    label = "proxy"

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        sink: EventSink | None = None,
        tool_map: ToolMap | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        subject_close_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        upstream_timeout: float = 60.0,
    ) -> None:
        self.upstream = upstream
        self.sink: EventSink = sink if sink is not None else NullSink()
        self.tool_map = tool_map if tool_map is not None else DEFAULT_TOOL_MAP
        self.subject_close_timeout = subject_close_timeout
        self.idle_timeout = idle_timeout
        self.upstream_timeout = upstream_timeout
        super().__init__((host, port))
        self._lock = threading.Condition()  # notified whenever a record changes
        self._conns: dict[str, ConnectionRecord] = {}
        self._ids = itertools.count(1)
        self._live: set[socket.socket] = set()

    def _make_server(self) -> _Server:
        server = _Server(self._bind, _Handler)
        server.proxy = self
        return server

    def _on_stop(self, server: _Server) -> None:
        with self._lock:
            live = list(self._live)
        for s in live:  # unblock handler threads still reading
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    # --- observations ---------------------------------------------------------------------------

    def connections(self) -> list[ConnectionRecord]:
        with self._lock:
            return [copy.deepcopy(c) for c in self._conns.values()]

    def connection(self, connection_id: str) -> ConnectionRecord | None:
        with self._lock:
            c = self._conns.get(connection_id)
            return copy.deepcopy(c) if c is not None else None

    def find_call(
        self, call_id: str, connection_id: str | None = None
    ) -> tuple[ConnectionRecord, ExchangeRecord] | None:
        """The latest exchange carrying `call_id` (on `connection_id`, if given)."""
        with self._lock:
            for c in reversed(list(self._conns.values())):
                if connection_id is not None and c.connection_id != connection_id:
                    continue
                for ex in reversed(c.exchanges):
                    if ex.call_id == call_id:
                        return copy.deepcopy(c), copy.deepcopy(ex)
        return None

    def wait_call(
        self, call_id: str, timeout: float = 10.0
    ) -> tuple[ConnectionRecord, ExchangeRecord] | None:
        """Like `find_call`, once the proxy is done with that exchange (or None on timeout)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = self.find_call(call_id)
                if found is not None and found[1].outcome != "pending":
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)

    # --- internals used by the handler ----------------------------------------------------------

    def _tool_for(self, method: str, path: str) -> str | None:
        if callable(self.tool_map):
            return self.tool_map(method, path)
        return self.tool_map.get((method, path))

    def _open(self, sock: socket.socket, peer: str) -> ConnectionRecord:
        with self._lock:
            cid = f"c{next(self._ids):06d}"
            rec = ConnectionRecord(cid, peer, str(time.time_ns()))
            self._conns[cid] = rec
            self._live.add(sock)
            return rec

    def _close(self, sock: socket.socket, rec: ConnectionRecord, ended_by: str) -> None:
        with self._lock:
            self._live.discard(sock)
            rec.closed_ns = str(time.time_ns())
            if rec.ended_by is None:
                rec.ended_by = ended_by

    def _count(self, rec: ConnectionRecord, ex: ExchangeRecord | None, what: str, n: int) -> None:
        with self._lock:
            setattr(rec, what, getattr(rec, what) + n)
            if ex is not None:
                setattr(ex, what, getattr(ex, what) + n)

    def _update(self, fn: Callable[[], None]) -> None:
        with self._lock:
            fn()
            self._lock.notify_all()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: EgressProxy


class _Handler(socketserver.BaseRequestHandler):
    server: _Server
    request: socket.socket

    def setup(self) -> None:
        self.proxy = self.server.proxy
        self.rec = self.proxy._open(
            self.request, f"{self.client_address[0]}:{self.client_address[1]}"
        )
        self.down = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_BODY)
        self.up: h11.Connection | None = None
        self.up_sock: socket.socket | None = None
        self.ex: ExchangeRecord | None = None
        self.decisions: list[Decision] = []
        self.request.settimeout(self.proxy.idle_timeout)
        # heads and bodies are separate writes: without this each waits out a delayed ACK (~88 ms)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        ended_by = "proxy_close"
        try:
            while True:
                got = self._read_request()
                if got is None:
                    ended_by = "subject_eof"
                    return
                if not self._exchange(*got):
                    return
                if h11.MUST_CLOSE in (self.down.our_state, self.down.their_state):
                    return
                self.down.start_next_cycle()
        except _SubjectGone as gone:
            ended_by = gone.how
        except h11.ProtocolError:
            ended_by = "protocol_error"
        finally:
            self._close_upstream()
            self.proxy._close(self.request, self.rec, ended_by)

    # --- subject side ---------------------------------------------------------------------------

    def _recv_down(self) -> bytes:
        try:
            data = self.request.recv(_RECV)
        except ConnectionResetError as exc:
            raise _SubjectGone("subject_reset") from exc
        except TimeoutError as exc:
            raise _SubjectGone("idle_timeout") from exc
        self.proxy._count(self.rec, self.ex, "downstream_request_bytes", len(data))
        return data

    def _send_down(self, data: bytes | None) -> None:
        if not data:
            return
        try:
            self.request.sendall(data)
        except OSError as exc:
            raise _Abort("downstream_failed") from exc
        self.proxy._count(self.rec, self.ex, "downstream_response_bytes", len(data))

    def _read_request(self) -> tuple[h11.Request, bytes] | None:
        req: h11.Request | None = None
        body = bytearray()
        self.ex = None  # bytes before the request line belong to no exchange yet
        while True:
            ev = self.down.next_event()
            if ev is h11.NEED_DATA:
                if self.down.they_are_waiting_for_100_continue:
                    self._send_down(
                        self.down.send(h11.InformationalResponse(status_code=100, headers=[]))
                    )
                self.down.receive_data(self._recv_down())
            elif isinstance(ev, h11.Request):
                req = ev
                self.ex = self._new_exchange(ev)
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                assert req is not None
                return req, bytes(body)
            elif isinstance(ev, h11.ConnectionClosed):
                return None

    def _new_exchange(self, req: h11.Request) -> ExchangeRecord:
        method, target = req.method.decode("ascii"), req.target.decode("ascii", "replace")
        sent = dict(req.headers).get(CALL_ID_HEADER)
        index = len(self.rec.exchanges) + 1
        ex = ExchangeRecord(
            index=index,
            call_id=sent.decode("ascii", "replace")
            if sent
            else f"{self.rec.connection_id}.{index}",
            call_id_assigned=not sent,
            tool=self.proxy._tool_for(method, urlsplit(target).path),
            method=method,
            target=target,
        )
        self.proxy._update(lambda: self.rec.exchanges.append(ex))
        return ex

    def _half_close_and_watch(
        self, timeout: float | None = None, on_closed: Callable[[], None] | None = None
    ) -> str:
        """Deliver nothing more, then see how the subject's side ends."""
        try:
            self.request.shutdown(socket.SHUT_WR)
        except OSError:
            return "reset"
        finally:
            if on_closed is not None:
                on_closed()
        wait = self.proxy.subject_close_timeout if timeout is None else timeout
        self.request.settimeout(wait)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if not self._recv_down():
                    return "eof"
            except _SubjectGone as gone:
                return "reset" if gone.how == "subject_reset" else "timeout"
        return "timeout"

    # --- one exchange ---------------------------------------------------------------------------

    def _phase(self, phase: Phase) -> Directive:
        ex = self.ex
        assert ex is not None
        self.proxy._update(lambda: ex.phases.append(phase.value))
        if ex.tool is None:
            return Directive(ex.directive)
        context = {"connection_id": self.rec.connection_id, "exchange": ex.index}
        d = self.proxy.sink.event(SOURCE, ex.tool, phase, ex.call_id, context)
        self.decisions.append(d)
        if d.directive.strength > Directive(ex.directive).strength:
            self.proxy._update(lambda: setattr(ex, "directive", d.directive.value))
        return Directive(ex.directive)

    def _exchange(self, req: h11.Request, body: bytes) -> bool:
        """Run one exchange; False when the subject connection must end."""
        ex = self.ex
        assert ex is not None
        self.proxy._update(lambda: setattr(ex, "request_body", body))
        outcome, keep = "failed", False  # unless the exchange runs to its end below
        try:
            if self._phase(Phase.RECEIVED) is Directive.CLOSE_WITHOUT_RESPONSE:
                raise _Abort("closed")
            self._forward(req, body)
            if self._phase(Phase.DISPATCHED) is Directive.CLOSE_WITHOUT_RESPONSE:
                raise _Abort("closed")
            resp, resp_body = self._read_response()
            self.proxy._update(lambda: setattr(ex, "status", resp.status_code))
            if self._phase(Phase.EFFECT_DONE) is not Directive.CONTINUE:
                raise _Abort("dropped")
            self._deliver(resp, resp_body)
            if self._phase(Phase.RESPONSE_SENT) is not Directive.CONTINUE:
                raise _Abort("closed")  # too late for zero bytes: the counts will show it
            outcome, keep = "delivered", True
        except _Abort as abort:
            outcome = abort.outcome
            if abort.outcome == "upstream_failed":
                keep = self._bad_gateway()
            elif abort.outcome == "dropped":
                # After a drop, the subject's end of the connection is evidence (lost_response's
                # agent_side): wait for it before the engine goes on.
                self._close_upstream()
                end = self._half_close_and_watch(None)
                self.proxy._update(lambda: setattr(ex, "subject_end", end))
            elif abort.outcome != "downstream_failed":
                # After a close nothing reads the subject's end, and a partition drops the
                # subject's FIN anyway: the directive's effect is the half-close itself, so the
                # engine goes on (witness, release) at once and the end is only recorded.
                self._close_upstream()
                end = self._half_close_and_watch(
                    CLOSE_WATCH_S, on_closed=lambda: self._finish(outcome)
                )
                self.proxy._update(lambda: setattr(ex, "subject_end", end))
        finally:
            self._finish(outcome)
        return keep

    def _finish(self, outcome: str) -> None:
        """Record the exchange's outcome and release the engine's held decisions (once)."""
        ex = self.ex
        assert ex is not None
        decisions, self.decisions = self.decisions, []
        if not decisions and ex.outcome == outcome:
            return
        self.proxy._update(lambda: setattr(ex, "outcome", outcome))
        for d in decisions:  # after the directive is applied and its effect observed
            d.complete()

    def _bad_gateway(self) -> bool:
        body = b'{"error":"upstream_failed"}'
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        headers.append(("Connection", "close"))
        try:
            self._send_down(self.down.send(h11.Response(status_code=502, headers=headers)))
            self._send_down(self.down.send(h11.Data(data=body)))
            self._send_down(self.down.send(h11.EndOfMessage()))
        except (_Abort, h11.ProtocolError):
            pass
        return False

    # --- upstream side --------------------------------------------------------------------------

    def _close_upstream(self) -> None:
        if self.up_sock is not None:
            self.up_sock.close()
        self.up_sock, self.up = None, None

    def _upstream(self) -> tuple[socket.socket, h11.Connection]:
        up = self.up
        if up is not None and up.our_state is h11.DONE and up.their_state is h11.DONE:
            up.start_next_cycle()  # keep-alive upstream
        if self.up is None or self.up_sock is None or self.up.our_state is not h11.IDLE:
            self._close_upstream()
            try:
                sock = socket.create_connection(self.proxy.upstream, self.proxy.upstream_timeout)
            except OSError as exc:
                raise _Abort("upstream_failed") from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.up_sock, self.up = (
                sock,
                h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_BODY),
            )
        return self.up_sock, self.up

    def _send_up(self, sock: socket.socket, data: bytes | None) -> None:
        if not data:
            return
        try:
            sock.sendall(data)
        except OSError as exc:
            raise _Abort("upstream_failed") from exc
        self.proxy._count(self.rec, self.ex, "upstream_request_bytes", len(data))

    def _forward(self, req: h11.Request, body: bytes) -> None:
        ex = self.ex
        assert ex is not None
        sock, up = self._upstream()
        headers = [(n, v) for n, v in _raw(req.headers) if n.lower() not in _HOP]
        if ex.call_id_assigned:  # so the destination's ledger can name the call
            headers.append((b"X-AFB-Call-Id", ex.call_id.encode()))
        url = urlsplit(req.target)
        target = req.target
        if url.scheme:  # absolute-form from a client configured for a forward proxy
            target = (url.path or b"/") + (b"?" + url.query if url.query else b"")
        self._send_up(sock, up.send(h11.Request(method=req.method, target=target, headers=headers)))
        if body:
            self._send_up(sock, up.send(h11.Data(data=body)))
        self._send_up(sock, up.send(h11.EndOfMessage()))

    def _read_response(self) -> tuple[h11.Response, bytes]:
        assert self.up is not None and self.up_sock is not None
        up, sock = self.up, self.up_sock
        resp: h11.Response | None = None
        body = bytearray()
        try:
            while True:
                ev = up.next_event()
                if ev is h11.NEED_DATA:
                    data = sock.recv(_RECV)
                    self.proxy._count(self.rec, self.ex, "upstream_response_bytes", len(data))
                    up.receive_data(data)
                elif isinstance(ev, h11.Response):
                    resp = ev
                elif isinstance(ev, h11.Data):
                    body += ev.data
                elif isinstance(ev, h11.EndOfMessage):
                    assert resp is not None
                    return resp, bytes(body)
                elif isinstance(ev, h11.ConnectionClosed):
                    raise _Abort("upstream_failed")
        except (OSError, h11.ProtocolError) as exc:
            raise _Abort("upstream_failed") from exc

    def _deliver(self, resp: h11.Response, body: bytes) -> None:
        headers = [(n, v) for n, v in _raw(resp.headers) if n.lower() not in _HOP]
        try:
            out = self.down.send(
                h11.Response(status_code=resp.status_code, headers=headers, reason=resp.reason)
            )
            self._send_down(out)
            if body:
                self._send_down(self.down.send(h11.Data(data=body)))
            self._send_down(self.down.send(h11.EndOfMessage()))
        except h11.ProtocolError as exc:
            raise _Abort("downstream_failed") from exc


def _raw(headers: Any) -> list[tuple[bytes, bytes]]:
    """Headers with their original case (plain iteration lower-cases the names)."""
    return list(headers.raw_items())
