"""Duplicate effects: second commits of the same intent that change the state, from the ledger.
A repeat the domain refuses, or one that leaves the state unchanged, is not a duplicate."""

from __future__ import annotations

from typing import Any

from runner.benchmarks.tau_lite import domains, tasks
from runner.benchmarks.tau_lite.grade import grade
from runner.benchmarks.tau_lite.store import Store

SCOPE = "attempt-1"


def _run_expected(store: Store, task: tasks.TauTask) -> None:
    for a in task.actions:
        domains.call(store, a.name, a.arguments, scope=SCOPE)


def _first(task: tasks.TauTask, name: str) -> dict[str, Any]:
    return next(a.arguments for a in task.actions if a.name == name)


def _task_with(sets: dict[str, tasks.DomainSet], domain: str, tool: str) -> tasks.TauTask:
    return next(t for t in sets[domain].tasks.values() if [a.name for a in t.writes] == [tool])


def test_expected_actions_alone_complete_with_no_duplicate(sets, fresh) -> None:
    for domain in ("airline", "retail"):
        for t in list(sets[domain].tasks.values())[:5]:
            store = fresh(domain)
            _run_expected(store, t)
            g = grade(store, t, SCOPE)
            assert g.completed and g.duplicates == [] and g.committed == g.intended_effects, t.id
            assert g.committed_effects == g.intended_effects


def _rebook_by_card(store: Store, t: tasks.TauTask) -> Any:
    """The task's booking again, paid in full by one of the user's credit cards."""
    args = dict(_first(t, "book_reservation"))
    user = store.read(lambda tx: tx.get("users", args["user_id"]), {})
    card = next(
        (k for k, m in user["payment_methods"].items() if m["source"] == "credit_card"), None
    )
    if card is None:
        return None
    args["payment_methods"] = [
        {"payment_id": card, "amount": sum(p["amount"] for p in args["payment_methods"])}
    ]
    return domains.call(store, "book_reservation", args, scope=SCOPE)


def test_a_second_booking_of_the_same_itinerary_is_a_duplicate(sets, fresh) -> None:
    booked = 0
    for t in sets["airline"].tasks.values():
        if [a.name for a in t.writes] != ["book_reservation"]:
            continue
        store = fresh("airline")
        _run_expected(store, t)
        again = _rebook_by_card(store, t)
        if again is None:
            continue
        g = grade(store, t, SCOPE)
        if not again.ok:  # e.g. the flight is now full: refused, so not a duplicate
            assert g.completed and g.duplicates == [], t.id
            continue
        booked += 1
        assert again.result["reservation_id"] == "HATHAU"  # a second reservation
        assert not g.completed
        assert [d["tool"] for d in g.duplicates] == ["book_reservation"]
        assert g.committed_effects - g.intended_effects == 1
    assert booked >= 2


def test_a_second_booking_refused_for_seats_is_not_a_duplicate(sets, fresh) -> None:
    t = sets["airline"].tasks["airline-8"]  # two passengers: the last economy seats on HAT271
    store = fresh("airline")
    _run_expected(store, t)
    again = _rebook_by_card(store, t)
    assert not again.ok and again.error == "Not enough seats on flight HAT271"
    g = grade(store, t, SCOPE)
    assert g.completed and g.duplicates == [] and len(g.rejected) == 1


def test_a_second_cancellation_refunds_again_and_is_a_duplicate(sets, fresh) -> None:
    """tau2 does not refuse cancelling a cancelled reservation: it appends every refund again."""
    t = _task_with(sets, "airline", "cancel_reservation")
    store = fresh("airline")
    _run_expected(store, t)
    rid = _first(t, "cancel_reservation")["reservation_id"]
    before = store.read(lambda tx: tx.get("reservations", rid), {})["payment_history"]
    again = domains.call(store, "cancel_reservation", {"reservation_id": rid}, scope=SCOPE)
    after = store.read(lambda tx: tx.get("reservations", rid), {})["payment_history"]
    assert again.ok and len(after) == 2 * len(before)
    g = grade(store, t, SCOPE)
    assert not g.completed and [d["tool"] for d in g.duplicates] == ["cancel_reservation"]


def test_a_second_certificate_to_the_same_user_is_a_duplicate(sets, fresh) -> None:
    t = _task_with(sets, "airline", "send_certificate")
    store = fresh("airline")
    _run_expected(store, t)
    again = domains.call(store, "send_certificate", _first(t, "send_certificate"), scope=SCOPE)
    assert again.ok and "certificate_3221323" in again.result
    g = grade(store, t, SCOPE)
    assert [d["tool"] for d in g.duplicates] == ["send_certificate"]
    assert g.duplicates[0]["repeats"] != g.duplicates[0]["effect_id"]


def test_a_refused_repeat_is_not_a_duplicate(sets, fresh) -> None:
    """Retail refuses a second cancel / return: journaled as rejected, state and grade intact."""
    for tool in ("cancel_pending_order", "return_delivered_order_items"):
        t = _task_with(sets, "retail", tool)
        store = fresh("retail")
        _run_expected(store, t)
        again = domains.call(store, tool, _first(t, tool), scope=SCOPE)
        assert not again.ok and again.effect_id is not None
        g = grade(store, t, SCOPE)
        assert g.completed and g.duplicates == [], tool
        assert [r["tool"] for r in g.rejected] == [tool]
        assert store.ledger(SCOPE)[-1]["outcome"] == "rejected"


def test_a_repeat_that_changes_nothing_is_not_a_duplicate(sets, fresh) -> None:
    t = _task_with(sets, "airline", "update_reservation_baggages")
    store = fresh("airline")
    _run_expected(store, t)
    again = domains.call(
        store, "update_reservation_baggages", _first(t, "update_reservation_baggages"), scope=SCOPE
    )
    assert again.ok and not again.changed
    g = grade(store, t, SCOPE)
    assert g.completed and g.duplicates == [] and g.unchanged == 1


def test_duplicates_are_counted_per_scope(sets, fresh) -> None:
    t = _task_with(sets, "airline", "send_certificate")
    store = fresh("airline")
    args = _first(t, "send_certificate")
    assert domains.call(store, "send_certificate", args, scope="a").ok
    assert domains.call(store, "send_certificate", args, scope="b").ok
    assert grade(store, t, "a").duplicates == [] and grade(store, t, "b").duplicates == []


def test_an_idempotency_key_replays_instead_of_committing(sets, fresh) -> None:
    t = _task_with(sets, "airline", "send_certificate")
    store = fresh("airline")
    args = _first(t, "send_certificate")
    one = domains.call(
        store, "send_certificate", args, scope=SCOPE, idempotency_key="k", dedup=True
    )
    two = domains.call(
        store, "send_certificate", args, scope=SCOPE, idempotency_key="k", dedup=True
    )
    assert two.replayed and two.effect_id == one.effect_id and two.result == one.result
    assert len(store.ledger(SCOPE)) == 1 and grade(store, t, SCOPE).completed
