"""tau2's data models as coercion specs: what pydantic would make of a value, without pydantic.

tau2's DB hash is sha256 of `json.dumps(db.model_dump(), sort_keys=True)`, so the port must hold
exactly what `model_dump` gives: floats where a field is a float (`100` -> `100.0`), optional
fields present as null, unknown keys of nested models dropped (pydantic's default `ignore`),
unknown keys at the DB root refused (tau2's `BaseModelNoExtra`). A spec mirrors one model of
tau2/domains/<domain>/data_model.py; `coerce` applies it (pydantic's lax mode for int/float,
strict for str) and raises `SchemaError` naming the path. The same specs validate the tool
arguments tau2 turns into models (FlightInfo, Passenger, Payment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class SchemaError(ValueError):
    """A value does not fit its model (message: path and what was expected)."""


@dataclass(frozen=True)
class Model:
    fields: dict[str, Any]
    optional: dict[str, Any] = field(default_factory=dict)  # name -> spec; default None
    forbid_extra: bool = False


@dataclass(frozen=True)
class Opt:
    spec: Any


@dataclass(frozen=True)
class ListOf:
    spec: Any


@dataclass(frozen=True)
class DictOf:
    spec: Any


@dataclass(frozen=True)
class Literal:
    values: tuple[str, ...]


class Number:
    """A tool argument tau2 takes as any number and uses as given (kept unchanged)."""


@dataclass(frozen=True)
class Tagged:
    """A union of models told apart by a Literal field (tau2's payment methods, flight dates)."""

    tag: str
    models: dict[str, Model]


def coerce(spec: Any, value: Any, path: str = "$") -> Any:
    if spec is str:
        if not isinstance(value, str):
            raise SchemaError(f"{path}: expected a string, got {type(value).__name__}")
        return value
    if spec is int:
        if isinstance(value, bool):
            raise SchemaError(f"{path}: expected an integer, got a boolean")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise SchemaError(f"{path}: expected an integer, got {value!r}")
    if spec is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if spec is Number:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(f"{path}: expected a number, got {value!r}")
        return value
    if spec is bool:
        if not isinstance(value, bool):
            raise SchemaError(f"{path}: expected a boolean, got {value!r}")
        return value
    if isinstance(spec, Literal):
        if value not in spec.values:
            raise SchemaError(f"{path}: expected one of {list(spec.values)}, got {value!r}")
        return value
    if isinstance(spec, Opt):
        return None if value is None else coerce(spec.spec, value, path)
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            raise SchemaError(f"{path}: expected a list, got {type(value).__name__}")
        return [coerce(spec.spec, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(spec, DictOf):
        if not isinstance(value, dict):
            raise SchemaError(f"{path}: expected an object, got {type(value).__name__}")
        return {k: coerce(spec.spec, v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(spec, Tagged):
        if not isinstance(value, dict) or value.get(spec.tag) not in spec.models:
            raise SchemaError(f"{path}: {spec.tag} must be one of {sorted(spec.models)}")
        return coerce(spec.models[value[spec.tag]], value, path)
    if isinstance(spec, Model):
        if not isinstance(value, dict):
            raise SchemaError(f"{path}: expected an object, got {type(value).__name__}")
        if spec.forbid_extra:
            extra = set(value) - set(spec.fields) - set(spec.optional)
            if extra:
                raise SchemaError(f"{path}: unknown keys {sorted(extra)}")
        out = {}
        for name, sub in spec.fields.items():
            if name not in value:
                raise SchemaError(f"{path}.{name}: missing")
            out[name] = coerce(sub, value[name], f"{path}.{name}")
        for name, sub in spec.optional.items():
            out[name] = coerce(Opt(sub), value.get(name), f"{path}.{name}")
        return out
    raise TypeError(f"unknown spec {spec!r}")  # a bug of this module, not bad data


# ---- airline (tau2/domains/airline/data_model.py) ----------------------------------------

CABIN = Literal(("business", "economy", "basic_economy"))
FLIGHT_TYPE = Literal(("round_trip", "one_way"))
INSURANCE = Literal(("yes", "no"))
NAME = Model({"first_name": str, "last_name": str})
PASSENGER = Model({"first_name": str, "last_name": str, "dob": str})
PAYMENT = Model({"payment_id": str, "amount": int})
FLIGHT_INFO = Model({"flight_number": str, "date": str})
RESERVATION_FLIGHT = Model(
    {"flight_number": str, "origin": str, "destination": str, "date": str, "price": int}
)
_AIRLINE_ADDRESS = Model(
    {"address1": str, "city": str, "country": str, "state": str, "zip": str},
    optional={"address2": str},
)
_AIRLINE_PAYMENT_METHOD = Tagged(
    "source",
    {
        "credit_card": Model({"source": str, "id": str, "brand": str, "last_four": str}),
        "gift_card": Model({"source": str, "id": str, "amount": float}),
        "certificate": Model({"source": str, "id": str, "amount": float}),
    },
)
_SEATS = DictOf(int)  # tau2: dict[CabinClass, int]
_FLIGHT_DATE = Tagged(
    "status",
    {
        "available": Model({"status": str, "available_seats": _SEATS, "prices": _SEATS}),
        "on time": Model(
            {"status": str, "estimated_departure_time_est": str, "estimated_arrival_time_est": str}
        ),
        "flying": Model(
            {"status": str, "actual_departure_time_est": str, "estimated_arrival_time_est": str}
        ),
        "landed": Model(
            {"status": str, "actual_departure_time_est": str, "actual_arrival_time_est": str}
        ),
        "cancelled": Model({"status": str}),
        "delayed": Model(
            {"status": str, "estimated_departure_time_est": str, "estimated_arrival_time_est": str}
        ),
    },
)
FLIGHT = Model(
    {
        "flight_number": str,
        "origin": str,
        "destination": str,
        "scheduled_departure_time_est": str,
        "scheduled_arrival_time_est": str,
        "dates": DictOf(_FLIGHT_DATE),
    }
)
AIRLINE_USER = Model(
    {
        "user_id": str,
        "name": NAME,
        "address": _AIRLINE_ADDRESS,
        "email": str,
        "dob": str,
        "payment_methods": DictOf(_AIRLINE_PAYMENT_METHOD),
        "saved_passengers": ListOf(PASSENGER),
        "membership": Literal(("gold", "silver", "regular")),
        "reservations": ListOf(str),
    }
)
RESERVATION = Model(
    {
        "reservation_id": str,
        "user_id": str,
        "origin": str,
        "destination": str,
        "flight_type": FLIGHT_TYPE,
        "cabin": CABIN,
        "flights": ListOf(RESERVATION_FLIGHT),
        "passengers": ListOf(PASSENGER),
        "payment_history": ListOf(PAYMENT),
        "created_at": str,
        "total_baggages": int,
        "nonfree_baggages": int,
        "insurance": INSURANCE,
    },
    optional={"status": Literal(("cancelled",))},
)

# ---- retail (tau2/domains/retail/data_model.py) ------------------------------------------

VARIANT = Model({"item_id": str, "options": DictOf(str), "available": bool, "price": float})
PRODUCT = Model({"name": str, "product_id": str, "variants": DictOf(VARIANT)})
RETAIL_ADDRESS = Model(
    {"address1": str, "address2": str, "city": str, "country": str, "state": str, "zip": str}
)
_RETAIL_PAYMENT_METHOD = Tagged(
    "source",
    {
        "credit_card": Model({"source": str, "id": str, "brand": str, "last_four": str}),
        "paypal": Model({"source": str, "id": str}),
        "gift_card": Model({"source": str, "id": str, "balance": float}),
    },
)
RETAIL_USER = Model(
    {
        "user_id": str,
        "name": NAME,
        "address": RETAIL_ADDRESS,
        "email": str,
        "payment_methods": DictOf(_RETAIL_PAYMENT_METHOD),
        "orders": ListOf(str),
    }
)
ORDER_STATUS = Literal(
    (
        "processed",
        "pending",
        "pending (item modified)",
        "delivered",
        "cancelled",
        "exchange requested",
        "return requested",
    )
)
ORDER = Model(
    {
        "order_id": str,
        "user_id": str,
        "address": RETAIL_ADDRESS,
        "items": ListOf(
            Model(
                {
                    "name": str,
                    "product_id": str,
                    "item_id": str,
                    "price": float,
                    "options": DictOf(str),
                }
            )
        ),
        "status": ORDER_STATUS,
        "fulfillments": ListOf(Model({"tracking_id": ListOf(str), "item_ids": ListOf(str)})),
        "payment_history": ListOf(
            Model(
                {
                    "transaction_type": Literal(("payment", "refund")),
                    "amount": float,
                    "payment_method_id": str,
                }
            )
        ),
    },
    optional={
        "cancel_reason": Literal(("no longer needed", "ordered by mistake")),
        "exchange_items": ListOf(str),
        "exchange_new_items": ListOf(str),
        "exchange_payment_method_id": str,
        "exchange_price_difference": float,
        "return_items": ListOf(str),
        "return_payment_method_id": str,
    },
)

# domain -> (collection -> (row model, key field)), in the DB root's field order
COLLECTIONS: dict[str, dict[str, tuple[Model, str]]] = {
    "airline": {
        "flights": (FLIGHT, "flight_number"),
        "users": (AIRLINE_USER, "user_id"),
        "reservations": (RESERVATION, "reservation_id"),
    },
    "retail": {
        "products": (PRODUCT, "product_id"),
        "users": (RETAIL_USER, "user_id"),
        "orders": (ORDER, "order_id"),
    },
}


def normalize_db(domain: str, data: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """db.json as tau2's `DB.model_validate(...).model_dump()` would give it."""
    root = Model(
        {name: DictOf(spec) for name, (spec, _) in COLLECTIONS[domain].items()}, forbid_extra=True
    )
    doc: dict[str, dict[str, dict[str, Any]]] = coerce(root, data, f"{domain}/db.json")
    return doc
