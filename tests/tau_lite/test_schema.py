"""schema.coerce makes what pydantic's model_dump would: checked on the wheel's own rows (an
idempotent normal form whose canonical text round-trips) and on generated values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.benchmarks.tau_lite import schema as s
from runner.benchmarks.tau_lite import wheel
from runner.benchmarks.tau_lite.store import row_text


@pytest.fixture(scope="module")
def docs(wheel_path: Path) -> dict[str, Any]:
    return {d: wheel.load_domain(wheel_path, d).db for d in wheel.DOMAINS}


def test_normal_form_is_idempotent_and_round_trips(docs: dict[str, Any]) -> None:
    for domain, raw in docs.items():
        once = s.normalize_db(domain, raw)
        assert s.normalize_db(domain, once) == once
        for coll, rows in once.items():
            for key, row in list(rows.items())[:200]:
                assert json.loads(row_text(row)) == row, (domain, coll, key)


def test_floats_where_the_model_says_float(docs: dict[str, Any]) -> None:
    doc = s.normalize_db("airline", docs["airline"])
    amounts = [
        m["amount"]
        for u in doc["users"].values()
        for m in u["payment_methods"].values()
        if m["source"] != "credit_card"
    ]
    assert amounts and all(isinstance(a, float) for a in amounts)
    pays = [p["amount"] for r in doc["reservations"].values() for p in r["payment_history"]]
    assert pays and all(type(p) is int for p in pays)
    assert all("status" in r for r in doc["reservations"].values())  # optional, dumped as null


@given(st.integers(-(10**6), 10**6))
def test_int_and_float_coercion(n: int) -> None:
    assert s.coerce(int, float(n)) == n and type(s.coerce(int, float(n))) is int
    assert s.coerce(float, n) == float(n) and type(s.coerce(float, n)) is float
    with pytest.raises(s.SchemaError):
        s.coerce(int, n + 0.5)
    with pytest.raises(s.SchemaError):
        s.coerce(str, n)


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=4))
def test_nested_models_drop_unknown_keys_the_root_refuses_them(extra: dict[str, str]) -> None:
    person = {"first_name": "A", "last_name": "B", "dob": "2000-01-01"}
    got = s.coerce(s.PASSENGER, {**extra, **person})
    assert got == person
    root = s.Model({"x": int}, forbid_extra=True)
    unknown = set(extra) - {"x"}
    if unknown:
        with pytest.raises(s.SchemaError, match="unknown keys"):
            s.coerce(root, {"x": 1, **{k: extra[k] for k in unknown}})


def test_errors_name_the_path() -> None:
    with pytest.raises(s.SchemaError, match=r"\$\.flights\[1\]\.date: missing"):
        s.coerce(
            s.Model({"flights": s.ListOf(s.FLIGHT_INFO)}),
            {"flights": [{"flight_number": "HAT1", "date": "d"}, {"flight_number": "HAT2"}]},
        )
    with pytest.raises(s.SchemaError, match="source must be one of"):
        s.coerce(s.AIRLINE_USER.fields["payment_methods"], {"x": {"source": "bitcoin", "id": "x"}})
