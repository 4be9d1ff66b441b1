"""The model backend: answers model calls per mode, keeps the ledger of answers it produced.

It listens on 127.0.0.1 only (the subject's namespace cannot reach it); the subject reaches it
through the model front (an egress proxy, see `../egress.py`), which carries the calls' fault
phases. Per request: the dialect from the path, then

- `live` / `record`: forward to the provider's upstream (`upstream.py`); `record` also keeps
  the exchange (normalized request, occurrence, exact response bytes) for the cassette;
- `replay`: look the (request key, occurrence) up in the recorded cassette;
- `scripted`: answer turn N (N = assistant turns already in the conversation) of the script;
  a `policy` cassette instead answers what its rules choose for the request
  (runner/runtime/cassettes/policy.py), rendered like a scripted turn.

A replay miss or a turn beyond the script is a divergence: a `ProxyEvent`, and a 422 with
`x-should-retry: false` (the SDKs then do not retry) and an error body naming the request key.
No HTTP answer from the upstream is an `upstream_error` event and a 502; an upstream HTTP error
status is passed through and also reported, so it is never mistaken for the agent's doing.

Every answer produced (2xx) is a ledger item, like the destination's: `GET /effects?scope=S` on
the ledger server (a second listener, not reachable through the front) lists the items whose
request named model S -- the lost_response witness reads it to see that the call's effect (the
model's answer) was really produced before the front dropped it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import runner.runtime.interposers.modelproxy.dialects as D
from runner.runtime.cassettes.format import (
    Cassette,
    Dialect,
    RecordedExchange,
    RecordedResponse,
    normalize_request,
    request_key,
)
from runner.runtime.cassettes.policy import Policy, PolicyCassette
from runner.runtime.interposers.modelproxy.upstream import Forwarder, UpstreamFailure

Mode = Literal["live", "record", "replay", "scripted"]
MODES: tuple[Mode, ...] = ("live", "record", "replay", "scripted")
CALL_ID_HEADER = "X-AFB-Call-Id"
MAX_BODY = 16 * 1024 * 1024
DIVERGENCE_STATUS = 422
HARNESS_STATUSES = frozenset({401, 403, 408, 429})


@dataclass(frozen=True)
class ProxyEvent:
    """Something the attempt must journal: the agent left the cassette, or the upstream failed."""

    kind: Literal["divergence", "upstream_error"]
    dialect: str
    call_id: str
    key: str  # the normalized request's content address
    occurrence: int
    turn: int
    status: int  # what the subject was answered
    message: str
    at_ns: str = field(default_factory=lambda: str(time.time_ns()))

    @property
    def harness_fault(self) -> bool:
        """Not the agent's doing: a divergence, no upstream answer, or an upstream status that
        says the provider (auth, quota, overload, outage) failed -- as opposed to a 4xx that
        the agent's own malformed request earned."""
        return self.kind == "divergence" or self.status in HARNESS_STATUSES or self.status >= 500

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "harness_fault": self.harness_fault}


class BackendState:
    """Counters, ledger, recording and events of one attempt's model calls (thread-safe)."""

    # Every answered request is handed to it before the answer is sent (the attempt sets an
    # `observe.ExchangeObserver`): (dialect, headers, body, status, content type, answer bytes).
    observer: Callable[[str, dict[str, str], dict[str, Any], int, str, bytes], None] | None = None

    def __init__(
        self,
        mode: Mode,
        cassette: Cassette | PolicyCassette | None,
        forwarder: Forwarder | None,
        on_event: Callable[[ProxyEvent], None] | None,
    ) -> None:
        self.mode = mode
        self.cassette = cassette
        self.policy = Policy(cassette) if isinstance(cassette, PolicyCassette) else None
        self.forwarder = forwarder
        self.on_event = on_event
        self._lock = threading.Lock()
        self._occurrences: dict[str, int] = {}
        self._recorded: list[RecordedExchange] = []
        self._events: list[ProxyEvent] = []
        self._ledger: list[dict[str, Any]] = []

    # --- read by the harness --------------------------------------------------------------------

    def recorded(self) -> list[RecordedExchange]:
        with self._lock:
            return list(self._recorded)

    def events(self) -> list[ProxyEvent]:
        with self._lock:
            return list(self._events)

    def ledger(self, scope: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(i) for i in self._ledger if scope is None or i["scope"] == scope]

    # --- one call -------------------------------------------------------------------------------

    def answer(
        self, dialect: Dialect, headers: dict[str, str], raw: bytes, body: dict[str, Any]
    ) -> tuple[int, str, bytes, dict[str, str]]:
        """(status, content type, body bytes, extra headers) for one model call."""
        norm = normalize_request(body)
        key = request_key(dialect, norm)
        call_id = headers.get(CALL_ID_HEADER.lower(), "")
        with self._lock:
            occurrence = self._occurrences.get(key, 0) + 1
            self._occurrences[key] = occurrence
        turn = D.assistant_turns(dialect, body)
        ref: dict[str, Any] = {"dialect": dialect, "call_id": call_id, "key": key}
        ref.update(occurrence=occurrence, turn=turn)
        if self.mode in ("live", "record"):
            assert self.forwarder is not None
            try:
                status, ctype, data = self.forwarder.forward(dialect, headers, raw)
            except UpstreamFailure as exc:
                msg = self.forwarder.redact(str(exc).encode()).decode("utf-8", "replace")
                return self._fail("upstream_error", 502, f"upstream unreachable: {msg}", ref)
            if status >= 400:
                snippet = data[:300].decode("utf-8", "replace")
                self._event("upstream_error", status, f"upstream HTTP {status}: {snippet}", ref)
            if self.mode == "record":
                self._record(dialect, key, occurrence, norm, status, ctype, data)
            source = "upstream"
        elif self.policy is not None:
            chosen = self.policy.select(dialect, body)
            if chosen.answer is None:
                why = f"no rule matches, the plan's {len(self.policy.c.plan)} steps are issued"
                return self._fail("divergence", DIVERGENCE_STATUS, why, ref)
            ctype, data = D.render(dialect, turn, chosen.answer, body, self.policy.c.model)
            status, source = 200, "policy"
        elif self.mode == "replay":
            assert isinstance(self.cassette, Cassette)
            hit = self.cassette.lookup(key, occurrence)
            if hit is None:
                why = f"no recorded answer for request {key} occurrence {occurrence}"
                return self._fail("divergence", DIVERGENCE_STATUS, why, ref)
            status, ctype = hit.response.status, hit.response.content_type
            data, source = hit.response.body_bytes(), "cassette"
        else:
            assert isinstance(self.cassette, Cassette)
            if turn >= len(self.cassette.turns):
                why = f"turn {turn} is beyond the script's {len(self.cassette.turns)} turns"
                return self._fail("divergence", DIVERGENCE_STATUS, why, ref)
            t = self.cassette.turns[turn]
            ctype, data = D.render(dialect, turn, t, body, self.cassette.model)
            status, source = 200, "script"
        if 200 <= status < 300:
            self._commit(body, status, data, source, ref)
        return status, ctype, data, {}

    def _record(
        self,
        dialect: Dialect,
        key: str,
        occurrence: int,
        norm: dict[str, Any],
        status: int,
        ctype: str,
        data: bytes,
    ) -> None:
        try:
            resp = RecordedResponse(status=status, content_type=ctype, body=data.decode("utf-8"))
        except UnicodeDecodeError:
            enc = base64.b64encode(data).decode()
            resp = RecordedResponse(
                status=status, content_type=ctype, body=enc, body_encoding="base64"
            )
        ex = RecordedExchange(
            key=key, occurrence=occurrence, dialect=dialect, request=norm, response=resp
        )
        with self._lock:
            self._recorded.append(ex)

    def _commit(
        self, body: dict[str, Any], status: int, data: bytes, source: str, ref: dict[str, Any]
    ) -> None:
        model = body.get("model")
        with self._lock:
            seq = len(self._ledger) + 1
            self._ledger.append(
                {
                    "effect_id": f"model-{seq:06d}",
                    "seq": seq,
                    "scope": model if isinstance(model, str) else "",
                    "kind": "model_call",
                    "source": source,
                    "status": status,
                    "response_sha256": hashlib.sha256(data).hexdigest(),
                    "committed_at_ns": str(time.time_ns()),
                    **ref,
                }
            )

    def _event(self, kind: Any, status: int, message: str, ref: dict[str, Any]) -> ProxyEvent:
        ev = ProxyEvent(kind=kind, status=status, message=message[:2000], **ref)
        with self._lock:
            self._events.append(ev)
        if self.on_event is not None:
            self.on_event(ev)  # outside the lock: the callback journals (fsync)
        return ev

    def _fail(
        self, kind: str, status: int, message: str, ref: dict[str, Any]
    ) -> tuple[int, str, bytes, dict[str, str]]:
        self._event(kind, status, message, ref)
        err = {"type": f"afb_{kind}", "message": message, "request_key": ref["key"]}
        body = {"type": "error", "error": err}  # Anthropic's error shape; OpenAI reads `error`
        return status, D.JSON, json.dumps(body).encode(), {"x-should-retry": "false"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: BackendState
    role: Literal["model", "ledger"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()  # head and body are separate writes: no Nagle wait between them
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(
        self, status: int, ctype: str, data: bytes, extra: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _error(self, status: int, message: str) -> None:
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        self.close_connection = True
        self._send(status, D.JSON, json.dumps(body).encode(), {"x-should-retry": "false"})

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("body too large")
        n = int(self.headers.get("Content-Length", "0"))
        if not 0 <= n <= MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(n)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if self.server.role != "ledger" or url.path != "/effects":
            self._error(404, "not found")
            return
        scopes = parse_qs(url.query).get("scope", [])
        if len(scopes) != 1 or not scopes[0]:
            self._error(400, "exactly one non-empty scope parameter is required")
            return
        items = self.server.state.ledger(scopes[0])
        data = json.dumps({"scope": scopes[0], "items": items}, sort_keys=True).encode()
        self._send(200, D.JSON, data)

    def do_POST(self) -> None:
        dialect = D.dialect_of(urlsplit(self.path).path)
        if self.server.role != "model" or dialect is None:
            self._error(404, f"no model endpoint at {self.path}")
            return
        try:
            raw = self._read_body()
            body = json.loads(raw)
        except ValueError as exc:
            self._error(400, f"request body is not JSON: {exc}")
            return
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object")
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, ctype, data, extra = self.server.state.answer(dialect, headers, raw, body)
        observer = self.server.state.observer
        if observer is not None:  # journaled before the answer leaves (observe.py)
            observer(dialect, headers, body, status, ctype, data)
        self._send(status, ctype, data, extra)


def make_server(
    bind: tuple[str, int], state: BackendState, role: Literal["model", "ledger"]
) -> _Server:
    server = _Server(bind, _Handler)
    server.state, server.role = state, role
    return server
