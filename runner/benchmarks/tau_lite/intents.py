"""What a second commit of the same intent is, per write tool (duplicate-effect recognition).

A ledger row's `intent` is a key computed from the call's arguments (and, where the target is
named indirectly, the state before it). Grading (grade.py) counts a committed call as a
duplicate effect when it CHANGED the state and an earlier changing commit of the same scope
has the same key, beyond the number of times the task's expected actions commit that key.
A repeat the domain refuses (a ledger row `rejected`) or one that leaves the state as it was
(`changed = 0`) is never a duplicate effect. The keys, and what a repeat of the same intent
does (the table: docs/TAU-LITE.md):
airline `book_reservation` (user, flight type, cabin, legs, passengers), `cancel_reservation`
(reservation; tau2 does not refuse a repeat, it refunds every payment again) and
`send_certificate` (user, amount) commit a second effect: duplicates. The airline updates
(reservation + the new values) repeat to the same state: no change. Every retail write's repeat
is refused (the status it needs is gone) or, for the two address tools, repeats to the same
state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from runner.benchmarks.tau_lite.store import Tx

Intent = Callable[[Tx, Mapping[str, Any]], str]


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def _people(passengers: Any) -> list[list[str]]:
    return sorted(
        [
            str(p.get("first_name", "")).strip().lower(),
            str(p.get("last_name", "")).strip().lower(),
            str(p.get("dob", "")),
        ]
        for p in passengers
        if isinstance(p, Mapping)
    )


def _legs(flights: Any) -> list[list[str]]:
    return sorted(
        [str(f.get("flight_number")), str(f.get("date"))] for f in flights if isinstance(f, Mapping)
    )


def _address(a: Mapping[str, Any]) -> list[Any]:
    return [a.get(k) for k in ("address1", "address2", "city", "state", "country", "zip")]


INTENTS: dict[str, dict[str, Intent]] = {
    "airline": {
        "book_reservation": lambda tx, a: _key(
            "book",
            a["user_id"],
            a["flight_type"],
            a["cabin"],
            _legs(a["flights"]),
            _people(a["passengers"]),
        ),
        "cancel_reservation": lambda tx, a: _key("cancel", a["reservation_id"]),
        "send_certificate": lambda tx, a: _key("certificate", a["user_id"], float(a["amount"])),
        "update_reservation_baggages": lambda tx, a: _key(
            "baggages", a["reservation_id"], a["total_baggages"], a["nonfree_baggages"]
        ),
        "update_reservation_flights": lambda tx, a: _key(
            "flights", a["reservation_id"], a["cabin"], _legs(a["flights"])
        ),
        "update_reservation_passengers": lambda tx, a: _key(
            "passengers", a["reservation_id"], _people(a["passengers"])
        ),
    },
    "retail": {
        "cancel_pending_order": lambda tx, a: _key("cancel", a["order_id"]),
        "return_delivered_order_items": lambda tx, a: _key("return", a["order_id"]),
        "exchange_delivered_order_items": lambda tx, a: _key("exchange", a["order_id"]),
        "modify_pending_order_items": lambda tx, a: _key("modify_items", a["order_id"]),
        "modify_pending_order_payment": lambda tx, a: _key(
            "payment", a["order_id"], a["payment_method_id"]
        ),
        "modify_pending_order_address": lambda tx, a: _key(
            "order_address", a["order_id"], _address(a)
        ),
        "modify_user_address": lambda tx, a: _key("user_address", a["user_id"], _address(a)),
    },
}


# What repeating a committed call with the same arguments does, per write tool (the docs'
# table; tests/tau_lite/test_intents.py repeats every kept task's every expected write and
# checks the outcome is one of these): "duplicate" commits a second effect, "unchanged"
# commits leaving the state as it was, "refused" is journaled as rejected.
REPEAT: dict[str, dict[str, frozenset[str]]] = {
    "airline": {
        "book_reservation": frozenset({"duplicate", "refused"}),  # refused: seats ran out
        "cancel_reservation": frozenset({"duplicate"}),
        "send_certificate": frozenset({"duplicate"}),
        "update_reservation_baggages": frozenset({"unchanged"}),
        "update_reservation_flights": frozenset({"unchanged"}),
        "update_reservation_passengers": frozenset({"unchanged"}),
    },
    "retail": {
        "cancel_pending_order": frozenset({"refused"}),
        "return_delivered_order_items": frozenset({"refused"}),
        "exchange_delivered_order_items": frozenset({"refused"}),
        "modify_pending_order_items": frozenset({"refused"}),
        "modify_pending_order_payment": frozenset({"refused"}),
        "modify_pending_order_address": frozenset({"unchanged"}),
        "modify_user_address": frozenset({"unchanged"}),
    },
}
