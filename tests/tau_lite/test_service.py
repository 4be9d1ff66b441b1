"""The tau-lite destination over HTTP: the runtime's ledger reader reads it unchanged, and
the ledger alone grades an attempt (the final state is the last commit's `state_after`)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from runner.benchmarks.tau_lite import tasks
from runner.benchmarks.tau_lite.grade import final_state, grade, grade_ledger
from runner.benchmarks.tau_lite.service import TauDestination
from runner.benchmarks.tau_lite.store import Store
from runner.runtime.attempt.grading import make_read_ledger

SCOPE = "run/a1"


def _post(addr: tuple[str, int], path: str, body: Any) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(*addr, timeout=30)
    try:
        data = json.dumps(body).encode()
        conn.request(
            "POST", path, data, {"Content-Type": "application/json", "X-AFB-Call-Id": "call-1"}
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _copy(sets: dict[str, tasks.DomainSet], domain: str, path: Path) -> Path:
    src = Store(sets[domain].pristine)
    src.copy_to(path).close()
    src.close()
    return path


def test_a_task_over_http_grades_from_the_ledger_alone(sets, tmp_path: Path) -> None:
    s = sets["airline"]
    t = s.tasks["airline-8"]
    path = _copy(sets, "airline", tmp_path / "a.db")
    with TauDestination(path) as dest:
        for a in t.actions:
            if a.name in {w.name for w in t.writes}:
                status, body = _post(
                    dest.address, f"/effects/{a.name}", {"scope": SCOPE, "payload": a.arguments}
                )
                assert status == 201 and body["committed"], body
            else:
                status, body = _post(dest.address, f"/tools/{a.name}", {"arguments": a.arguments})
                assert status == 200 and body["ok"], body
        items, failures = make_read_ledger(dest.address)(SCOPE)
    assert failures == [] and items is not None
    assert [i["kind"] for i in items] == ["book_reservation"] and items[0]["call_id"] == "call-1"
    g = grade_ledger(items, t, final_state(items, s.pristine_hash))
    store = Store(path)
    try:
        assert g == grade(store, t, SCOPE) and g.completed and g.duplicates == []
    finally:
        store.close()


def test_a_refusal_is_422_and_journaled_not_an_effect(sets, tmp_path: Path) -> None:
    path = _copy(sets, "retail", tmp_path / "r.db")
    with TauDestination(path) as dest:
        status, body = _post(
            dest.address,
            "/effects",
            {
                "scope": SCOPE,
                "kind": "cancel_pending_order",
                "payload": {"order_id": "#W0000000", "reason": "x"},
            },
        )
        assert status == 422 and body["committed"] is False and body["error"] == "Order not found"
        items, _ = make_read_ledger(dest.address)(SCOPE)
        assert items == []
        conn = http.client.HTTPConnection(*dest.address, timeout=30)
        conn.request("GET", f"/journal?scope={SCOPE.replace('/', '%2F')}")
        journal = json.loads(conn.getresponse().read())["items"]
        conn.close()
        assert [j["outcome"] for j in journal] == ["rejected"]
        assert final_state(items, sets["retail"].pristine_hash) == sets["retail"].pristine_hash


def test_bad_requests_are_named(sets, tmp_path: Path) -> None:
    path = _copy(sets, "airline", tmp_path / "b.db")
    with TauDestination(path) as dest:
        status, body = _post(dest.address, "/effects/get_user_details", {"scope": SCOPE})
        assert status == 400 and "no write tool 'get_user_details'" in body["error"]
        status, body = _post(
            dest.address,
            "/effects/send_certificate",
            {"scope": SCOPE, "kind": "cancel_reservation", "payload": {}},
        )
        assert status == 400 and "does not name the route's tool" in body["error"]
        status, body = _post(dest.address, "/tools/book_reservation", {"arguments": {}})
        assert status == 404
        status, body = _post(dest.address, "/effects/send_certificate", {"payload": {}})
        assert status == 400 and "scope" in body["error"]


def test_idempotency_keys_when_the_capability_is_on(sets, tmp_path: Path) -> None:
    path = _copy(sets, "airline", tmp_path / "i.db")
    body = {
        "scope": SCOPE,
        "payload": {"user_id": "mia_li_3668", "amount": 50},
        "idempotency_key": "k1",
    }
    with TauDestination(path, idempotency_keys=True) as dest:
        s1, b1 = _post(dest.address, "/effects/send_certificate", body)
        s2, b2 = _post(dest.address, "/effects/send_certificate", body)
        items, _ = make_read_ledger(dest.address)(SCOPE)
    assert (s1, s2) == (201, 200) and b2["replayed"] and b1["effect_id"] == b2["effect_id"]
    assert items is not None and len(items) == 1


def test_concurrent_writes_serialize_on_the_store(sets, tmp_path: Path) -> None:
    """Eight clients at once send a certificate to one user: tau2 hands out three certificate
    ids, so exactly three commit, five are refused ("Too many certificates"), and the ledger
    and the state agree."""
    import threading

    path = _copy(sets, "airline", tmp_path / "c.db")
    results: list[int] = []
    with TauDestination(path) as dest:

        def send(i: int) -> None:
            status, _ = _post(
                dest.address,
                "/effects/send_certificate",
                {"scope": SCOPE, "payload": {"user_id": "mia_li_3668", "amount": i}},
            )
            results.append(status)

        threads = [threading.Thread(target=send, args=(i + 1,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        items, _ = make_read_ledger(dest.address)(SCOPE)
    assert sorted(results) == [201] * 3 + [422] * 5
    assert items is not None and len(items) == 3
    store = Store(path)
    try:
        user = store.read(lambda tx: tx.get("users", "mia_li_3668"), {})
        certs = {k for k in user["payment_methods"] if k.startswith("certificate_322132")}
        assert certs == {"certificate_3221322", "certificate_3221323", "certificate_3221324"}
        assert store.state_hash() == items[-1]["state_after"]
    finally:
        store.close()


def test_a_commit_survives_a_destination_restart(sets, tmp_path: Path) -> None:
    t = sets["airline"].tasks["airline-8"]
    book = next(a for a in t.actions if a.name == "book_reservation")
    path = _copy(sets, "airline", tmp_path / "s.db")
    with TauDestination(path) as dest:
        status, body = _post(
            dest.address, "/effects/book_reservation", {"scope": SCOPE, "payload": book.arguments}
        )
        assert status == 201
    with TauDestination(path) as dest:  # a new server over the same file
        items, _ = make_read_ledger(dest.address)(SCOPE)
        status, again = _post(
            dest.address,
            "/tools/get_reservation_details",
            {"arguments": {"reservation_id": body["result"]["reservation_id"]}},
        )
    assert items is not None and [i["effect_id"] for i in items] == [body["effect_id"]]
    assert status == 200 and again["result"] == body["result"]
    assert final_state(items, sets["airline"].pristine_hash) == t.gold_hash
