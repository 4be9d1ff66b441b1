"""lost_response end to end: a deterministic subject, the real proxy and destination, the
engine, the journal, and the evaluator's verdict against witnesses/lost_response.json."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.journal import Journal, read_journal
from runner.evaluator.protocol.faultkinds import LOST_RESPONSE
from runner.evaluator.protocol.spec import Trigger
from runner.evaluator.protocol.witness import WitnessContract, evaluate_witness, load_contracts
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.faults.base import FaultPlugin
from runner.runtime.faults.lost_response import LostResponseFault, read_effects
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from tests.runtime_interposers.conftest import CELL, effect

WITNESSES = Path(__file__).resolve().parents[2] / "witnesses"
PARAMS = {"endpoint": "destination"}


@pytest.fixture(scope="module")
def contract() -> WitnessContract:
    return load_contracts(WITNESSES)[LOST_RESPONSE]


@dataclass
class SubjectLog:
    outcomes: list[str] = field(default_factory=list)  # per submit: "ok <effect_id>" | "lost"
    reconciled: list[str] = field(default_factory=list)


def tiny_subject(proxy: tuple[str, int], scope: str, submits: int) -> SubjectLog:
    """Deterministic test subject: N submits, then reconcile by querying its scope."""
    log = SubjectLog()
    for n in range(1, submits + 1):
        conn = http.client.HTTPConnection(*proxy, timeout=20)
        try:
            body = json.dumps(effect(scope, n)).encode()
            conn.request("POST", "/effects", body, {"X-AFB-Call-Id": f"submit-{n}"})
            resp = conn.getresponse()
            log.outcomes.append(f"ok {json.loads(resp.read())['effect_id']}")
        except (http.client.RemoteDisconnected, ConnectionResetError):
            log.outcomes.append("lost")
        finally:
            conn.close()
    conn = http.client.HTTPConnection(*proxy, timeout=20)
    conn.request("GET", f"/effects?scope={scope}")
    log.reconciled = [i["effect_id"] for i in json.loads(conn.getresponse().read())["items"]]
    conn.close()
    return log


@dataclass
class Attempt:
    log: SubjectLog
    observations: dict[str, dict[str, Any]]
    types: list[str]
    receipt_applied: bool | None


def run_attempt(
    journal: Journal,
    destination: DestinationService,
    make_plugin: Any,
    *,
    phase: Phase = Phase.EFFECT_DONE,
    submits: int = 3,
    read_from: tuple[str, int] | None = None,
    judge: WitnessContract | None = None,
) -> Attempt:
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    with EgressProxy(destination.address, sink=engine, subject_close_timeout=5) as proxy:
        plugin: FaultPlugin = make_plugin(proxy, read_from or destination.address)
        trigger = Trigger(tool="submit_patch", ordinal=2, phase=phase)
        engine.schedule("lost-2", LOST_RESPONSE, trigger, plugin, PARAMS, judge)
        engine.arm()
        out: list[SubjectLog] = []
        t = threading.Thread(
            target=lambda: out.append(tiny_subject(proxy.address, "repo", submits))
        )
        t.start()
        t.join(60)
        assert out, "subject did not finish"
    engine.finish()
    recs = [e.record for e in read_journal(journal.path)]
    obs = {r.name: r.observation for r in recs if r.type == "witness_observation"}
    receipts = [r for r in recs if r.type == "actuator_receipt"]
    kinds = [f"lifecycle:{r.state}" if r.type == "lifecycle" else r.type for r in recs]
    return Attempt(out[0], obs, kinds, receipts[0].applied if receipts else None)


def real(proxy: EgressProxy, dest: tuple[str, int]) -> FaultPlugin:
    return LostResponseFault(proxy, dest)


def noop(proxy: EgressProxy, dest: tuple[str, int]) -> FaultPlugin:
    return LostResponseFault(proxy, dest).noop()


def test_real_actuator_is_witnessed(
    journal: Journal, destination: DestinationService, contract: WitnessContract
) -> None:
    a = run_attempt(journal, destination, real)
    assert a.log.outcomes[0].startswith("ok") and a.log.outcomes[1] == "lost"
    assert a.log.outcomes[2].startswith("ok")
    assert len(a.log.reconciled) == 3  # the lost one was committed all the same
    assert a.receipt_applied is True
    assert a.types == [
        "lifecycle:scheduled",
        "lifecycle:armed",
        "trigger_reached",
        "actuator_receipt",
        "lifecycle:injected",
        "witness_observation",
        "witness_observation",
        "witness_observation",
        "lifecycle:witnessed",
        "lifecycle:released",
        "tool_calls",
    ]
    pc, dl, ag = (
        a.observations[n] for n in ("proxy_connection", "destination_ledger", "agent_side")
    )
    assert pc["upstream_request_bytes"] > 0 and pc["upstream_response_bytes"] > 0
    assert pc["downstream_response_bytes"] == 0 and pc["connection_id"]
    assert dl["committed"] is True and dl["effect_id"] == a.log.reconciled[1]
    assert dl["shape_failures"] == []
    assert ag["transport_failure"] is True and ag["subject_end"] == "eof"
    verdict = evaluate_witness(contract, a.observations, PARAMS)
    assert verdict.satisfied, verdict.violations


def test_noop_actuator_is_rejected(
    journal: Journal, destination: DestinationService, contract: WitnessContract
) -> None:
    a = run_attempt(journal, destination, noop)
    assert all(o.startswith("ok") for o in a.log.outcomes)  # nothing was actually lost
    assert a.receipt_applied is True  # ... though the actuator says it was applied
    assert "lifecycle:witnessed" in a.types  # observations were recorded: they just disagree
    verdict = evaluate_witness(contract, a.observations, PARAMS)
    assert not verdict.satisfied
    assert "zero_bytes_delivered" in verdict.violations
    assert "agent_saw_transport_failure" in verdict.violations


def test_judged_noop_is_rejected_before_release(
    journal: Journal, destination: DestinationService, contract: WitnessContract
) -> None:
    # The runtime runs the evaluator's own check on what it persisted before it releases.
    a = run_attempt(journal, destination, noop, judge=contract)
    assert a.types[-5:] == [
        "witness_observation",
        "witness_observation",
        "lifecycle:rejected",
        "lifecycle:released",  # a release still runs: nothing may stay held
        "tool_calls",
    ]
    assert "lifecycle:witnessed" not in a.types
    assert a.observations["destination_ledger"]["component"] == "destination"


def test_drop_after_the_response_was_sent_contradicts(
    journal: Journal, destination: DestinationService, contract: WitnessContract
) -> None:
    # Applied too late: the proxy closes the connection, but the bytes were already delivered.
    a = run_attempt(journal, destination, real, phase=Phase.RESPONSE_SENT)
    assert a.receipt_applied is True
    assert a.observations["proxy_connection"]["downstream_response_bytes"] > 0
    verdict = evaluate_witness(contract, a.observations, PARAMS)
    assert not verdict.satisfied
    assert {"zero_bytes_delivered", "agent_saw_transport_failure"} <= set(verdict.violations)


def test_never_reached_means_no_injection(
    journal: Journal, destination: DestinationService
) -> None:
    a = run_attempt(journal, destination, real, submits=1)
    assert a.log.outcomes[0].startswith("ok")
    assert a.observations == {} and a.receipt_applied is None
    assert a.types == ["lifecycle:scheduled", "lifecycle:armed", "tool_calls"]


class _Sloppy(BaseHTTPRequestHandler):
    """A destination read endpoint that silently ignores the scope filter."""

    protocol_version = "HTTP/1.1"
    ledger: Any = None
    html = False

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.html:
            data, ctype = b"<html>login</html>", "text/html"
        else:
            body = {"scope": "repo", "items": self.ledger.all()}
            data, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def sloppy(destination: DestinationService) -> Iterator[tuple[str, int]]:
    handler = type("H", (_Sloppy,), {"ledger": destination.ledger})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield server.server_address[:2]  # type: ignore[misc]
    server.shutdown()
    server.server_close()


def test_unscoped_ledger_read_fails_closed(
    journal: Journal,
    destination: DestinationService,
    sloppy: tuple[str, int],
    contract: WitnessContract,
) -> None:
    # Another scope's commit makes the ignored filter visible.
    destination.ledger.commit(
        scope="elsewhere", kind="patch", payload=None, idempotency_key=None,
        call_id="submit-2", dedup=False,
    )  # fmt: skip
    a = run_attempt(journal, destination, real, read_from=sloppy)
    dl = a.observations["destination_ledger"]
    assert dl["committed"] is False and dl["effect_id"] == ""
    assert dl["shape_failures"] == ["item_out_of_scope"]
    verdict = evaluate_witness(contract, a.observations, PARAMS)
    assert verdict.violations == ["destination_committed", "effect_id_present"]


def test_read_effects_shape_checks(
    destination: DestinationService, sloppy: tuple[str, int]
) -> None:
    destination.ledger.commit(
        scope="repo", kind="k", payload=1, idempotency_key=None, call_id="c", dedup=False
    )
    items, failures = read_effects(destination.address, "repo")
    assert failures == [] and [i["call_id"] for i in items] == ["c"]
    assert read_effects(sloppy, "other")[1] == ["scope_not_echoed", "item_out_of_scope"]
    _Sloppy.html = True
    try:
        assert read_effects(sloppy, "repo")[1] == ["content_type_mismatch", "body_not_parseable"]
    finally:
        _Sloppy.html = False
