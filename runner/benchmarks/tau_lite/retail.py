"""tau2's retail tools (tau2/domains/retail/tools.py, 26.3), ported onto the SQLite store.

Same rules, messages and arithmetic as tau2, on rows as dicts. Deviations, each deliberate:
- a refused call changes nothing (one transaction). tau2's `cancel_pending_order` refunds gift
  cards as it walks the payments, so if a later payment's method is missing tau2 keeps the
  earlier refunds in memory while raising; here the whole call is refused and nothing changes;
- arguments are checked against the signature first (the agent's error when they misfit);
- `calculate` is evaluated over the AST (tooling.calculate), not by eval().
Kept as tau2 has it: `modify_pending_order_items` gives every modified item the price and
options of the LAST new variant of the call (tau2's loop variable), and does not round the
price difference it records. Every retail write refuses its own repeat (the status it needs is
gone) or, for addresses, repeats to the same state: runner/benchmarks/tau_lite/intents.py.
"""

from __future__ import annotations

import json
from typing import Any

from runner.benchmarks.tau_lite import schema as s
from runner.benchmarks.tau_lite.store import DomainError, Tx
from runner.benchmarks.tau_lite.tooling import Tool, calculate, tool

TOOLS: dict[str, Tool] = {}


def _order(tx: Tx, order_id: str) -> dict[str, Any]:
    order = tx.get("orders", order_id)
    if order is None:
        raise DomainError("Order not found")
    return order


def _user(tx: Tx, user_id: str) -> dict[str, Any]:
    user = tx.get("users", user_id)
    if user is None:
        raise DomainError("User not found")
    return user


def _product(tx: Tx, product_id: str) -> dict[str, Any]:
    product = tx.get("products", product_id)
    if product is None:
        raise DomainError("Product not found")
    return product


def _variant(tx: Tx, product_id: str, variant_id: str) -> Any:
    product = _product(tx, product_id)
    if variant_id not in product["variants"]:
        raise DomainError("Variant not found")
    return product["variants"][variant_id]


def _payment_method(tx: Tx, user_id: str, payment_method_id: str) -> Any:
    user = _user(tx, user_id)
    if payment_method_id not in user["payment_methods"]:
        raise DomainError("Payment method not found")
    return user["payment_methods"][payment_method_id]


def _is_gift_card(method: dict[str, Any]) -> bool:
    return bool(method["source"] == "gift_card")


@tool(TOOLS, "generic", "calculate", expression=str)
def _calculate(tx: Tx, expression: str) -> str:
    return calculate(expression)


@tool(TOOLS, "write", order_id=str, reason=str)
def cancel_pending_order(tx: Tx, order_id: str, reason: str) -> dict[str, Any]:
    order = _order(tx, order_id)
    if order["status"] != "pending":
        raise DomainError("Non-pending order cannot be cancelled")
    if reason not in {"no longer needed", "ordered by mistake"}:
        raise DomainError("Invalid reason")
    refunds = []
    for payment in order["payment_history"]:
        pid = payment["payment_method_id"]
        refunds.append(
            {"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": pid}
        )
        user = _user(tx, order["user_id"])
        method = _payment_method(tx, user["user_id"], pid)
        if _is_gift_card(method):
            method["balance"] += payment["amount"]
            method["balance"] = round(method["balance"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return order


def _check_items(order: dict[str, Any], item_ids: list[str], message: str) -> None:
    all_item_ids = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > all_item_ids.count(item_id):
            raise DomainError(message.format(item_id=item_id))


@tool(
    TOOLS,
    "write",
    order_id=str,
    item_ids=s.ListOf(str),
    new_item_ids=s.ListOf(str),
    payment_method_id=str,
)
def exchange_delivered_order_items(
    tx: Tx, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(tx, order_id)
    if order["status"] != "delivered":
        raise DomainError("Non-delivered order cannot be exchanged")
    _check_items(order, item_ids, "Number of {item_id} not found.")
    if len(item_ids) != len(new_item_ids):
        raise DomainError("The number of items to be exchanged should match.")
    diff_price: float = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = next((i for i in order["items"] if i["item_id"] == item_id), None)
        if item is None:
            raise DomainError(f"Item {item_id} not found")
        variant = _variant(tx, item["product_id"], new_item_id)
        if not variant["available"]:
            raise DomainError(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    diff_price = round(diff_price, 2)
    method = _payment_method(tx, order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff_price:
        raise DomainError("Insufficient gift card balance to pay for the price difference")
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff_price
    return order


@tool(TOOLS, "read", first_name=str, last_name=str, zip=str)
def find_user_id_by_name_zip(tx: Tx, first_name: str, last_name: str, zip: str) -> str:
    for user in tx.scan("users"):
        if (
            user["name"]["first_name"].lower() == first_name.lower()
            and user["name"]["last_name"].lower() == last_name.lower()
            and user["address"]["zip"] == zip
        ):
            return str(user["user_id"])
    raise DomainError("User not found")


@tool(TOOLS, "read", email=str)
def find_user_id_by_email(tx: Tx, email: str) -> str:
    for user in tx.scan("users"):
        if user["email"].lower() == email.lower():
            return str(user["user_id"])
    raise DomainError("User not found")


@tool(TOOLS, "read", order_id=str)
def get_order_details(tx: Tx, order_id: str) -> dict[str, Any]:
    return _order(tx, order_id)


@tool(TOOLS, "read", product_id=str)
def get_product_details(tx: Tx, product_id: str) -> dict[str, Any]:
    return _product(tx, product_id)


@tool(TOOLS, "read", user_id=str)
def get_user_details(tx: Tx, user_id: str) -> dict[str, Any]:
    return _user(tx, user_id)


@tool(TOOLS, "read")
def list_all_product_types(tx: Tx) -> str:
    return json.dumps({p["name"]: p["product_id"] for p in tx.scan("products")}, sort_keys=True)


_ADDRESS: dict[str, Any] = {
    "address1": str,
    "address2": str,
    "city": str,
    "state": str,
    "country": str,
    "zip": str,
}


def _address(
    address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, str]:
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


@tool(TOOLS, "write", None, order_id=str, **_ADDRESS)
def modify_pending_order_address(tx: Tx, order_id: str, **address: str) -> dict[str, Any]:
    order = _order(tx, order_id)
    if "pending" not in order["status"]:
        raise DomainError("Non-pending order cannot be modified")
    order["address"] = _address(**address)
    return order


@tool(
    TOOLS,
    "write",
    order_id=str,
    item_ids=s.ListOf(str),
    new_item_ids=s.ListOf(str),
    payment_method_id=str,
)
def modify_pending_order_items(
    tx: Tx, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(tx, order_id)
    if order["status"] != "pending":
        raise DomainError("Non-pending order cannot be modified")
    _check_items(order, item_ids, "{item_id} not found")
    if len(item_ids) != len(new_item_ids):
        raise DomainError("The number of items to be exchanged should match")
    diff_price: float = 0
    variant: dict[str, Any] | None = None
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        if item_id == new_item_id:
            raise DomainError("The new item id should be different from the old item id")
        item = next((i for i in order["items"] if i["item_id"] == item_id), None)
        if item is None:
            raise DomainError(f"Item {item_id} not found")
        variant = _variant(tx, item["product_id"], new_item_id)
        if not variant["available"]:
            raise DomainError(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    method = _payment_method(tx, order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff_price:
        raise DomainError("Insufficient gift card balance to pay for the new item")
    order["payment_history"].append(
        {
            "transaction_type": "payment" if diff_price > 0 else "refund",
            "amount": float(abs(diff_price)),
            "payment_method_id": payment_method_id,
        }
    )
    if _is_gift_card(method):
        method["balance"] -= diff_price
        method["balance"] = round(method["balance"], 2)
    for item_id, _new in zip(item_ids, new_item_ids, strict=True):
        item = next((i for i in order["items"] if i["item_id"] == item_id), None)
        if item is None:  # pragma: no cover - checked above, as in tau2
            raise DomainError(f"Item {item_id} not found")
        assert variant is not None
        item["item_id"] = _new
        item["price"] = variant["price"]  # tau2: the loop's last variant, for every item
        item["options"] = variant["options"]
    order["status"] = "pending (item modified)"
    return order


@tool(TOOLS, "write", order_id=str, payment_method_id=str)
def modify_pending_order_payment(tx: Tx, order_id: str, payment_method_id: str) -> dict[str, Any]:
    order = _order(tx, order_id)
    if "pending" not in order["status"]:
        raise DomainError("Non-pending order cannot be modified")
    method = _payment_method(tx, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise DomainError("There should be exactly one payment for a pending order")
    if history[0]["payment_method_id"] == payment_method_id:
        raise DomainError("The new payment method should be different from the current one")
    amount = history[0]["amount"]
    if _is_gift_card(method) and method["balance"] < amount:
        raise DomainError("Insufficient gift card balance to pay for the order")
    history.extend(
        [
            {
                "transaction_type": "payment",
                "amount": amount,
                "payment_method_id": payment_method_id,
            },
            {
                "transaction_type": "refund",
                "amount": amount,
                "payment_method_id": history[0]["payment_method_id"],
            },
        ]
    )
    if _is_gift_card(method):
        method["balance"] -= amount
        method["balance"] = round(method["balance"], 2)
    old = _payment_method(tx, order["user_id"], history[0]["payment_method_id"])
    if _is_gift_card(old):
        old["balance"] += amount
        old["balance"] = round(old["balance"], 2)
    return order


@tool(TOOLS, "write", None, user_id=str, **_ADDRESS)
def modify_user_address(tx: Tx, user_id: str, **address: str) -> dict[str, Any]:
    user = _user(tx, user_id)
    user["address"] = _address(**address)
    return user


@tool(TOOLS, "write", order_id=str, item_ids=s.ListOf(str), payment_method_id=str)
def return_delivered_order_items(
    tx: Tx, order_id: str, item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(tx, order_id)
    if order["status"] != "delivered":
        raise DomainError("Non-delivered order cannot be returned")
    user = _user(tx, order["user_id"])
    method = _payment_method(tx, user["user_id"], payment_method_id)
    if not order["payment_history"]:
        raise DomainError("Order has no payment")  # tau2: IndexError on payment_history[0]
    if (
        not _is_gift_card(method)
        and payment_method_id != order["payment_history"][0]["payment_method_id"]
    ):
        raise DomainError("Payment method should be the original payment method")
    _check_items(order, item_ids, "Some item not found")
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return order


@tool(TOOLS, "generic", summary=str)
def transfer_to_human_agents(tx: Tx, summary: str) -> str:
    return "Transfer successful"
