"""Egress proxy: real h11 forwarding, exact byte counts, lost response, hold in flight."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from runner.evaluator.core.types import Phase
from runner.runtime.events import Decision, Directive
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from tests.runtime_interposers.conftest import CountingUpstream, H11Client, effect, request


class Sink:
    """Answers `directive` at (tool, phase); optionally blocks there until `release` is set."""

    def __init__(self, at: Phase | None = None, directive: Directive = Directive.CONTINUE) -> None:
        self.at, self.directive = at, directive
        self.hold = False
        self.reached = threading.Event()
        self.release = threading.Event()
        self.events: list[tuple[str, Phase, str, dict[str, Any]]] = []

    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        self.events.append((tool, phase, call_id, dict(context or {})))
        if phase is not self.at:
            return Decision()
        self.reached.set()
        if self.hold:
            assert self.release.wait(10)
        return Decision(self.directive)


def test_forwards_and_counts_exact_bytes() -> None:
    up = CountingUpstream(reply=b'{"effect_id":"e1","committed":true}')
    sink = Sink()
    try:
        with EgressProxy(up.address, sink=sink) as proxy:
            client = H11Client(proxy.address)
            body = json.dumps(effect("s", 1)).encode()
            status, out = client.request("POST", "/effects", body, [("X-AFB-Call-Id", "k-1")])
            assert status == 201 and out == up.reply
            status, _ = client.request("GET", "/effects?scope=s", b"", [])  # unmapped: no event
            assert status == 201
            client.close()
            assert up.requests[0][:2] == ("/effects", body)
            # Counts land just after each sendall: wait until the proxy is done with the GET.
            assert proxy.wait_call(f"{proxy.connections()[0].connection_id}.2") is not None
            conns = proxy.connections()
            assert len(conns) == 1
            c = conns[0]
            # Exact: what the subject sent/received and what the upstream received/sent.
            assert c.downstream_request_bytes == client.sent
            assert c.downstream_response_bytes == client.received
            assert c.upstream_request_bytes == up.received
            assert c.upstream_response_bytes == up.sent
            first = c.exchanges[0]
            assert first.call_id == "k-1" and first.tool == "submit_patch"
            assert 0 < first.upstream_response_bytes == first.downstream_response_bytes
            assert first.outcome == "delivered" and first.phases == [p.value for p in Phase]
            assert c.exchanges[1].tool is None
        assert [(t, p, cid) for t, p, cid, _ in sink.events] == [
            ("submit_patch", p, "k-1") for p in Phase
        ]
        assert sink.events[0][3]["connection_id"] == c.connection_id
    finally:
        up.close()


def test_real_destination_through_proxy_and_assigned_call_id(
    destination: DestinationService,
) -> None:
    with EgressProxy(destination.address) as proxy:
        status, out = request(proxy.address, "POST", "/effects", effect("repo", 7))
        assert status == 201 and out["committed"] is True
        status, listing = request(proxy.address, "GET", "/effects?scope=repo")
        assert status == 200 and listing["items"][0]["effect_id"] == out["effect_id"]
        ex = proxy.connections()[0].exchanges[0]
        assert ex.call_id_assigned
        # The proxy named the call for the destination, so its ledger can be correlated.
        assert listing["items"][0]["call_id"] == ex.call_id


def _post_via(proxy: EgressProxy, call_id: str, scope: str = "repo") -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(*proxy.address, timeout=10)
    body = json.dumps(effect(scope, 1)).encode()
    conn.request("POST", "/effects", body=body, headers={"X-AFB-Call-Id": call_id})
    return conn


def test_lost_response_delivers_zero_bytes_while_destination_commits(
    destination: DestinationService,
) -> None:
    sink = Sink(at=Phase.EFFECT_DONE, directive=Directive.DROP_RESPONSE)
    with EgressProxy(destination.address, sink=sink) as proxy:
        conn = _post_via(proxy, "lost-1")
        with pytest.raises(http.client.RemoteDisconnected):
            conn.getresponse()
        conn.close()  # the subject gives up on the connection: the proxy sees EOF
        committed = destination.ledger.query("repo")
        assert [i["call_id"] for i in committed] == ["lost-1"]
        found = proxy.wait_call("lost-1")
        assert found is not None
        _, ex = found
        assert ex.upstream_request_bytes > 0 and ex.upstream_response_bytes > 0
        assert ex.downstream_response_bytes == 0
        assert ex.outcome == "dropped" and ex.subject_end == "eof"
        assert ex.phases == ["received", "dispatched", "effect_done"]


def test_close_without_response_at_received_never_reaches_destination(
    destination: DestinationService,
) -> None:
    sink = Sink(at=Phase.RECEIVED, directive=Directive.CLOSE_WITHOUT_RESPONSE)
    with EgressProxy(destination.address, sink=sink) as proxy:
        conn = _post_via(proxy, "c-1")
        with pytest.raises(http.client.RemoteDisconnected):
            conn.getresponse()
        conn.close()
        assert destination.ledger.query("repo") == []
        _, ex = proxy.wait_call("c-1") or (None, None)
        assert ex is not None and ex.upstream_request_bytes == 0 and ex.outcome == "closed"


def test_hold_in_flight_until_released(destination: DestinationService) -> None:
    sink = Sink(at=Phase.RECEIVED)
    sink.hold = True
    with EgressProxy(destination.address, sink=sink) as proxy:
        result: dict[str, Any] = {}

        def subject() -> None:
            conn = _post_via(proxy, "h-1")
            resp = conn.getresponse()
            result["status"] = resp.status
            result["body"] = json.loads(resp.read())
            conn.close()

        t = threading.Thread(target=subject)
        t.start()
        assert sink.reached.wait(10)
        t.join(0.3)
        assert t.is_alive() and "status" not in result  # the call is held ...
        assert destination.ledger.query("repo") == []  # ... before it reached the destination
        sink.release.set()
        t.join(10)
        assert result["status"] == 201
        assert [i["effect_id"] for i in destination.ledger.query("repo")] == [
            result["body"]["effect_id"]
        ]


def test_upstream_down_is_a_bad_gateway() -> None:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        addr = s.getsockname()[:2]
    with EgressProxy(addr) as proxy:
        status, body = request(proxy.address, "POST", "/effects", effect("s"))
        assert status == 502 and body == {"error": "upstream_failed"}
