"""tau2's airline tools (tau2/domains/airline/tools.py, 26.3), ported onto the SQLite store.

Line for line the same rules, messages, ids and arithmetic as tau2 (so the DB hash after a
call is tau2's), on rows as dicts. Deviations, each deliberate:
- a refused call changes nothing (one transaction); tau2 mutates in memory as it goes, but
  every airline write checks before it mutates, so no airline outcome differs;
- arguments are checked against the signature first (tau2 stores a mistyped scalar such as
  `total_baggages="2"` as given; here it is refused, the agent's error);
- `calculate` is evaluated over the AST (tooling.calculate), not by eval().
Kept as tau2 has them: cancelling a cancelled reservation is NOT refused (it appends the
refund of every payment again); flight changes and cancellations do not release seats.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from runner.benchmarks.tau_lite import schema as s
from runner.benchmarks.tau_lite.store import DomainError, Tx
from runner.benchmarks.tau_lite.tooling import Tool, calculate, tool

TOOLS: dict[str, Tool] = {}
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")  # tau2: at most 3 bookings a task
NEW_PAYMENT_IDS = (3221322, 3221323, 3221324)
NOW = "2024-05-15T15:00:00"


def _user(tx: Tx, user_id: str) -> dict[str, Any]:
    user = tx.get("users", user_id)
    if user is None:
        raise DomainError(f"User {user_id} not found")
    return user


def _reservation(tx: Tx, reservation_id: str) -> dict[str, Any]:
    res = tx.get("reservations", reservation_id)
    if res is None:
        raise DomainError(f"Reservation {reservation_id} not found")
    return res


def _flight(tx: Tx, flight_number: str) -> dict[str, Any]:
    flight = tx.get("flights", flight_number)
    if flight is None:
        raise DomainError(f"Flight {flight_number} not found")
    return flight


def _flight_instance(tx: Tx, flight_number: str, date: str) -> Any:
    flight = _flight(tx, flight_number)
    if date not in flight["dates"]:
        raise DomainError(f"Flight {flight_number} not found on date {date}")
    return flight["dates"][date]


def _search_direct(
    tx: Tx,
    date: str,
    origin: str | None = None,
    destination: str | None = None,
    leave_after: str | None = None,
) -> list[dict[str, Any]]:
    results = []
    for f in tx.scan("flights"):
        if (
            (origin is None or f["origin"] == origin)
            and (destination is None or f["destination"] == destination)
            and date in f["dates"]
            and f["dates"][date]["status"] == "available"
            and (leave_after is None or f["scheduled_departure_time_est"] >= leave_after)
        ):
            results.append(
                {
                    "flight_number": f["flight_number"],
                    "origin": f["origin"],
                    "destination": f["destination"],
                    "status": "available",
                    "scheduled_departure_time_est": f["scheduled_departure_time_est"],
                    "scheduled_arrival_time_est": f["scheduled_arrival_time_est"],
                    "date": None,
                    "available_seats": f["dates"][date]["available_seats"],
                    "prices": f["dates"][date]["prices"],
                }
            )
    return results


def _payment_for_update(
    user: dict[str, Any], payment_id: str, total_price: int
) -> dict[str, Any] | None:
    if payment_id not in user["payment_methods"]:
        raise DomainError("Payment method not found")
    method = user["payment_methods"][payment_id]
    if method["source"] == "certificate":
        raise DomainError("Certificate cannot be used to update reservation")
    elif method["source"] == "gift_card" and method["amount"] < total_price:
        raise DomainError("Gift card balance is not enough")
    if method["source"] == "gift_card":
        method["amount"] -= total_price
    payment = None
    if total_price != 0:
        payment = {"payment_id": payment_id, "amount": total_price}
    return payment


@tool(
    TOOLS,
    "write",
    user_id=str,
    origin=str,
    destination=str,
    flight_type=str,
    cabin=str,
    flights=s.ListOf(s.FLIGHT_INFO),
    passengers=s.ListOf(s.PASSENGER),
    payment_methods=s.ListOf(s.PAYMENT),
    total_baggages=int,
    nonfree_baggages=int,
    insurance=str,
)
def book_reservation(
    tx: Tx,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list[dict[str, Any]],
    passengers: list[dict[str, Any]],
    payment_methods: list[dict[str, Any]],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> dict[str, Any]:
    user = _user(tx, user_id)
    reservation_id = next(
        (r for r in NEW_RESERVATION_IDS if tx.get("reservations", r) is None), None
    )
    if reservation_id is None:
        raise DomainError("Too many reservations")
    try:  # tau2 builds the Reservation model here: its Literals are checked now
        reservation = s.coerce(
            s.RESERVATION,
            {
                "reservation_id": reservation_id,
                "user_id": user_id,
                "origin": origin,
                "destination": destination,
                "flight_type": flight_type,
                "cabin": cabin,
                "flights": [],
                "passengers": copy.deepcopy(passengers),
                "payment_history": copy.deepcopy(payment_methods),
                "created_at": NOW,
                "total_baggages": total_baggages,
                "nonfree_baggages": nonfree_baggages,
                "insurance": insurance,
            },
        )
    except s.SchemaError as exc:
        raise DomainError(f"invalid reservation: {exc}") from None
    total_price = 0
    all_dates: list[dict[str, Any]] = []
    for info in flights:
        number = info["flight_number"]
        flight = _flight(tx, number)
        date_data = _flight_instance(tx, number, info["date"])
        if date_data["status"] != "available":
            raise DomainError(f"Flight {number} not available on date {info['date']}")
        if date_data["available_seats"][cabin] < len(passengers):
            raise DomainError(f"Not enough seats on flight {number}")
        price = date_data["prices"][cabin]
        reservation["flights"].append(
            {
                "origin": flight["origin"],
                "destination": flight["destination"],
                "flight_number": number,
                "date": info["date"],
                "price": price,
            }
        )
        all_dates.append(date_data)
        total_price += price * len(passengers)
    if insurance == "yes":
        total_price += 30 * len(passengers)
    total_price += 50 * nonfree_baggages
    for pm in payment_methods:
        pid, amount = pm["payment_id"], pm["amount"]
        if pid not in user["payment_methods"]:
            raise DomainError(f"Payment method {pid} not found")
        upm = user["payment_methods"][pid]
        if upm["source"] in {"gift_card", "certificate"} and upm["amount"] < amount:
            raise DomainError(f"Not enough balance in payment method {pid}")
    total_payment = sum(pm["amount"] for pm in payment_methods)
    if total_payment != total_price:
        raise DomainError(
            "Payment amount does not add up, "
            f"total price is {total_price}, but paid {total_payment}"
        )
    for pm in payment_methods:
        upm = user["payment_methods"][pm["payment_id"]]
        if upm["source"] == "gift_card":
            upm["amount"] -= pm["amount"]
        elif upm["source"] == "certificate":
            user["payment_methods"].pop(pm["payment_id"])
    for date_data in all_dates:
        date_data["available_seats"][cabin] -= len(passengers)
    tx.insert("reservations", reservation_id, reservation)
    user["reservations"].append(reservation_id)
    booked: dict[str, Any] = reservation
    return booked


@tool(TOOLS, "generic", "calculate", expression=str)
def _calculate(tx: Tx, expression: str) -> str:
    return calculate(expression)


@tool(TOOLS, "write", reservation_id=str)
def cancel_reservation(tx: Tx, reservation_id: str) -> dict[str, Any]:
    reservation = _reservation(tx, reservation_id)
    refunds = [
        {"payment_id": p["payment_id"], "amount": -p["amount"]}
        for p in reservation["payment_history"]
    ]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return reservation  # tau2: "Seats release not implemented for cancellation"


@tool(TOOLS, "read", reservation_id=str)
def get_reservation_details(tx: Tx, reservation_id: str) -> dict[str, Any]:
    return _reservation(tx, reservation_id)


@tool(TOOLS, "read", user_id=str)
def get_user_details(tx: Tx, user_id: str) -> dict[str, Any]:
    return _user(tx, user_id)


@tool(TOOLS, "read")
def list_all_airports(tx: Tx) -> Any:
    return json.loads(tx.meta["airports"])  # read from the wheel's tools.py at build time


@tool(TOOLS, "read", origin=str, destination=str, date=str)
def search_direct_flight(tx: Tx, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
    return _search_direct(tx, date=date, origin=origin, destination=destination)


@tool(TOOLS, "read", origin=str, destination=str, date=str)
def search_onestop_flight(
    tx: Tx, origin: str, destination: str, date: str
) -> list[list[dict[str, Any]]]:
    results = []
    for r1 in _search_direct(tx, date=date, origin=origin, destination=None):
        r1["date"] = date
        date2 = (
            f"2024-05-{int(date[-2:]) + 1}" if "+1" in r1["scheduled_arrival_time_est"] else date
        )
        for r2 in _search_direct(
            tx,
            date=date2,
            origin=r1["destination"],
            destination=destination,
            leave_after=r1["scheduled_arrival_time_est"],
        ):
            r2["date"] = date2
            results.append([r1, r2])
    return results


@tool(TOOLS, "write", user_id=str, amount=s.Number)
def send_certificate(tx: Tx, user_id: str, amount: float) -> str:
    user = _user(tx, user_id)
    for payment_id in [f"certificate_{i}" for i in NEW_PAYMENT_IDS]:
        if payment_id not in user["payment_methods"]:
            user["payment_methods"][payment_id] = {
                "id": payment_id,
                "amount": float(amount),
                "source": "certificate",
            }
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    raise DomainError("Too many certificates")


@tool(TOOLS, "generic", summary=str)
def transfer_to_human_agents(tx: Tx, summary: str) -> str:
    return "Transfer successful"


@tool(TOOLS, "write", reservation_id=str, total_baggages=int, nonfree_baggages=int, payment_id=str)
def update_reservation_baggages(
    tx: Tx, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> dict[str, Any]:
    reservation = _reservation(tx, reservation_id)
    user = _user(tx, reservation["user_id"])
    total_price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    payment = _payment_for_update(user, payment_id, total_price)
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    return reservation


@tool(
    TOOLS,
    "write",
    reservation_id=str,
    cabin=s.CABIN,
    flights=s.ListOf(s.FLIGHT_INFO),
    payment_id=str,
)
def update_reservation_flights(
    tx: Tx, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str
) -> dict[str, Any]:
    reservation = _reservation(tx, reservation_id)
    user = _user(tx, reservation["user_id"])
    n = len(reservation["passengers"])
    total_price = 0
    new_flights = []
    for info in flights:
        match = next(
            (
                rf
                for rf in reservation["flights"]
                if rf["flight_number"] == info["flight_number"]
                and rf["date"] == info["date"]
                and cabin == reservation["cabin"]
            ),
            None,
        )
        if match:
            total_price += match["price"] * n
            new_flights.append(match)
            continue
        flight = _flight(tx, info["flight_number"])
        date_data = _flight_instance(tx, info["flight_number"], info["date"])
        if date_data["status"] != "available":
            raise DomainError(
                f"Flight {info['flight_number']} not available on date {info['date']}"
            )
        if date_data["available_seats"][cabin] < n:
            raise DomainError(f"Not enough seats on flight {info['flight_number']}")
        rf = {
            "flight_number": info["flight_number"],
            "date": info["date"],
            "price": date_data["prices"][cabin],
            "origin": flight["origin"],
            "destination": flight["destination"],
        }
        total_price += rf["price"] * n
        new_flights.append(rf)
    total_price -= sum(f["price"] for f in reservation["flights"]) * n
    payment = _payment_for_update(user, payment_id, total_price)
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["flights"] = new_flights
    reservation["cabin"] = cabin
    return reservation  # tau2 does not update seats here either


@tool(TOOLS, "write", reservation_id=str, passengers=s.ListOf(s.PASSENGER))
def update_reservation_passengers(
    tx: Tx, reservation_id: str, passengers: list[dict[str, Any]]
) -> dict[str, Any]:
    reservation = _reservation(tx, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise DomainError("Number of passengers does not match")
    reservation["passengers"] = copy.deepcopy(passengers)
    return reservation


@tool(TOOLS, "read", flight_number=str, date=str)
def get_flight_status(tx: Tx, flight_number: str, date: str) -> Any:
    return _flight_instance(tx, flight_number, date)["status"]
