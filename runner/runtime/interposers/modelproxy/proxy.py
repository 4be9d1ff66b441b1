"""`ModelProxy`: the subject's model endpoint, a front that carries fault phases and a backend
that answers.

    subject (netns) --HTTP--> front (EgressProxy, on the veth host address)
                                 |  received / dispatched / effect_done / response_sent
                                 |  -> the attempt's trigger engine, tool "model"
                                 v
                              backend (127.0.0.1): live | record | replay | scripted
                              ledger  (127.0.0.1): GET /effects?scope=<model>

The front is an egress proxy (the same class, byte accounting and drop/close directives the
destination's calls go through), so a model call is a tool call named `model` for triggers and
`lost_response`, `network_partition` and `sigkill_mid_tool_call` are witnessed on it under the
same contracts: the front's exchange record is the `egress_proxy` collector's evidence, the
backend's ledger the independent record that the answer was produced. Only the front's
connection ids differ (`m000001` rather than `c000001`), so that call ids assigned by the two
egress proxies of one attempt never collide in the engine.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Self

import h11

import runner.runtime.interposers.modelproxy.dialects as D
from runner.evaluator.core.errors import InputError
from runner.runtime.cassettes.format import CASSETTE_VERSION, Cassette, RecordedExchange
from runner.runtime.cassettes.policy import PolicyCassette
from runner.runtime.events import EventSink
from runner.runtime.interposers.egress import ConnectionRecord, EgressProxy, ExchangeRecord
from runner.runtime.interposers.egress import _Handler as _EgressHandler
from runner.runtime.interposers.egress import _Server as _EgressServer
from runner.runtime.interposers.modelproxy.backend import (
    MODES,
    BackendState,
    Mode,
    ProxyEvent,
    _Server,
    make_server,
)
from runner.runtime.interposers.modelproxy.upstream import Forwarder, Upstream, resolve

TOOL = "model"
DUMMY_KEY = "sk-afb-model-proxy-dummy"  # what the subject is given; dropped by the proxy


def model_tool(method: str, path: str) -> str | None:
    """The front's tool map: every model endpoint is the tool `model`."""
    return TOOL if method == "POST" and D.dialect_of(path) is not None else None


class _FrontHandler(_EgressHandler):
    def _upstream(self) -> tuple[socket.socket, h11.Connection]:
        sock, up = super()._upstream()
        _nodelay(sock)
        return sock, up


def _nodelay(sock: socket.socket) -> None:
    """Heads and bodies are separate writes: without this each waits for a delayed ACK."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ModelFront(EgressProxy):
    """An egress proxy whose connection (and so assigned call) ids start with `m`, with
    TCP_NODELAY on both of its sockets."""

    label = "model-front"

    def _make_server(self) -> _EgressServer:
        server = _EgressServer(self._bind, _FrontHandler)
        server.proxy = self
        return server

    def _open(self, sock: socket.socket, peer: str) -> ConnectionRecord:
        _nodelay(sock)
        with self._lock:
            cid = f"m{next(self._ids):06d}"
            rec = ConnectionRecord(cid, peer, str(time.time_ns()))
            self._conns[cid] = rec
            self._live.add(sock)
            return rec


class ModelProxy:
    """One attempt's model proxy. See the module docstring; `start()` -> front (host, port)."""

    def __init__(
        self,
        mode: Mode,
        *,
        cassette: Cassette | PolicyCassette | None = None,
        upstreams: Mapping[str, Upstream] | None = None,
        sink: EventSink | None = None,
        on_event: Callable[[ProxyEvent], None] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        environ: Mapping[str, str] | None = None,
        upstream_timeout: float = 600.0,
    ) -> None:
        if mode not in MODES:
            raise InputError(f"unknown model proxy mode {mode!r}; expected one of {MODES}")
        want = {"replay": "recorded", "scripted": "scripted"}.get(mode)
        kinds = {"scripted": ("scripted", "policy")}.get(mode, (want,))
        if want is not None and (cassette is None or cassette.kind not in kinds):
            got = "none" if cassette is None else f"a {cassette.kind} one"
            raise InputError(f"{mode} mode needs a {want} cassette, got {got}", key="cassette")
        if want is None and cassette is not None:
            raise InputError(f"{mode} mode takes no cassette", key="cassette")
        forwarder = None
        if mode in ("live", "record"):  # keys are checked now: before any cell runs
            forwarder = Forwarder(resolve(upstreams or {}, environ), upstream_timeout)
        self.mode = mode
        self.cassette = cassette
        self.state = BackendState(mode, cassette, forwarder, on_event)
        self.front = ModelFront(
            ("127.0.0.1", 0),
            sink=sink,
            tool_map=model_tool,
            host=host,
            port=port,
            upstream_timeout=upstream_timeout,
        )
        self._servers: list[tuple[_Server, threading.Thread]] = []

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        for role in ("model", "ledger"):
            server = make_server(("127.0.0.1", 0), self.state, role)
            t = threading.Thread(
                target=server.serve_forever, args=(0.05,), name=f"afb-model-{role}", daemon=True
            )
            t.start()
            self._servers.append((server, t))
        self.front.upstream = self.backend_address
        self.front.start()
        return self.front.address

    def stop(self) -> None:
        self.front.stop()
        for server, t in self._servers:
            server.shutdown()
            server.server_close()
            t.join(timeout=5)
        self._servers.clear()
        if self.state.forwarder is not None:
            self.state.forwarder.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- addresses ------------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """The subject-facing address (the network_partition target for tool `model`)."""
        return self.front.address

    def _addr(self, i: int) -> tuple[str, int]:
        if len(self._servers) <= i:
            raise RuntimeError("model proxy not started")
        host, port = self._servers[i][0].server_address[:2]
        return str(host), int(port)

    @property
    def backend_address(self) -> tuple[str, int]:
        return self._addr(0)

    @property
    def ledger_address(self) -> tuple[str, int]:
        """Where the lost_response witness reads the answers produced: `GET /effects?scope=`."""
        return self._addr(1)

    def base_urls(self) -> dict[str, str]:
        host, port = self.address
        return {
            "OPENAI_BASE_URL": f"http://{host}:{port}/v1",
            "ANTHROPIC_BASE_URL": f"http://{host}:{port}",
        }

    def subject_env(self) -> dict[str, str]:
        """Base URLs plus the dummy keys the SDKs insist on (the proxy drops them)."""
        return {**self.base_urls(), "OPENAI_API_KEY": DUMMY_KEY, "ANTHROPIC_API_KEY": DUMMY_KEY}

    # --- evidence -------------------------------------------------------------------------------

    def recorded_cassette(self) -> Cassette | None:
        """Record mode: the cassette of everything answered so far (None in other modes)."""
        if self.mode != "record":
            return None
        return Cassette(
            version=CASSETTE_VERSION,
            kind="recorded",
            recorded=_in_occurrence_order(self.state.recorded()),
        )

    def events(self) -> list[ProxyEvent]:
        return self.state.events()

    def divergences(self) -> list[ProxyEvent]:
        return [e for e in self.state.events() if e.kind == "divergence"]

    def ledger(self) -> list[dict[str, object]]:
        return self.state.ledger()

    def find_call(
        self, call_id: str, connection_id: str | None = None
    ) -> tuple[ConnectionRecord, ExchangeRecord] | None:
        """The front's record of a model call (what fault collectors read)."""
        return self.front.find_call(call_id, connection_id)


def _in_occurrence_order(entries: list[RecordedExchange]) -> tuple[RecordedExchange, ...]:
    """Chronological order, except that each key's occurrences are ascending (concurrent
    calls of one request may finish out of order)."""
    slots: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        slots.setdefault(e.key, []).append(i)
    out = list(entries)
    for idx in slots.values():
        for i, e in zip(
            idx, sorted((entries[i] for i in idx), key=lambda e: e.occurrence), strict=True
        ):
            out[i] = e
    return tuple(out)
