"""Canonical bytes: the six RFC 8785 reference vectors, the project's vectors, and rejections."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalError,
    canonical_bytes,
    digest,
    fast_canonical_bytes,
    is_digest,
    parse_json,
)
from tests.foundation.helpers import CANONICAL, RFC8785, bench

RFC_NAMES = ["arrays", "french", "structures", "unicode", "values", "weird"]
OWN_NAMES = sorted(p.stem for p in CANONICAL.glob("*.json"))
REJECTS = json.loads((CANONICAL / "reject" / "expected.json").read_text("utf-8"))["cases"]


def test_reference_vectors_are_all_present() -> None:
    assert sorted(p.stem for p in (RFC8785 / "input").glob("*.json")) == RFC_NAMES
    assert len(OWN_NAMES) >= 6


@pytest.mark.parametrize("name", RFC_NAMES)
def test_rfc8785_vector_library(name: str) -> None:
    expected = (RFC8785 / "output" / f"{name}.json").read_bytes()
    assert (
        bytes.fromhex(
            (RFC8785 / "outhex" / f"{name}.txt").read_text().replace(" ", "").replace("\n", "")
        )
        == expected
    )
    value = parse_json((RFC8785 / "input" / f"{name}.json").read_bytes())
    assert canonical_bytes(value) == expected
    assert fast_canonical_bytes(value) == expected  # the fast path every digest goes through


@pytest.mark.parametrize("name", RFC_NAMES)
def test_rfc8785_vector_cli_canonicalize(name: str) -> None:
    result = bench("canonicalize", RFC8785 / "input" / f"{name}.json")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == (RFC8785 / "output" / f"{name}.json").read_bytes()


@pytest.mark.parametrize("name", RFC_NAMES)
def test_rfc8785_vector_cli_digest(name: str) -> None:
    expected = (
        "sha256:" + hashlib.sha256((RFC8785 / "output" / f"{name}.json").read_bytes()).hexdigest()
    )
    result = bench("digest", RFC8785 / "input" / f"{name}.json")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected + "\n"


@pytest.mark.parametrize("name", OWN_NAMES)
def test_project_vector(name: str) -> None:
    expected = (CANONICAL / f"{name}.out").read_bytes()
    assert canonical_bytes(parse_json((CANONICAL / f"{name}.json").read_bytes())) == expected
    result = bench("canonicalize", CANONICAL / f"{name}.json")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == expected


def test_utf16_key_order() -> None:
    # U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FF61 (code-point order would differ).
    assert canonical_bytes({"\uff61": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uff61":1}'.encode()


def test_safe_integer_bounds_and_negative_zero() -> None:
    assert (
        canonical_bytes([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER])
        == b"[9007199254740991,-9007199254740991]"
    )
    assert canonical_bytes(-0.0) == b"0"
    for bad in (MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**64):
        with pytest.raises(CanonicalError, match="2\\^53"):
            canonical_bytes({"k": bad})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_rejected(value: float) -> None:
    with pytest.raises(CanonicalError) as info:
        canonical_bytes({"a": [0, value]})
    assert info.value.path == "/a/1"


def test_unrepresentable_type_rejected_with_path() -> None:
    with pytest.raises(CanonicalError) as info:
        canonical_bytes({"a~b/c": {1, 2}})
    assert info.value.path == "/a~0b~1c"


@pytest.mark.parametrize("name", sorted(REJECTS))
def test_rejection_vector(name: str) -> None:
    case = REJECTS[name]
    path = CANONICAL / "reject" / f"{name}.json"
    with pytest.raises(CanonicalError) as info:
        canonical_bytes(parse_json(path.read_bytes()))
    assert info.value.path == case["path"]
    assert case["message"] in str(info.value)
    for command in ("canonicalize", "digest"):
        result = bench(command, path)
        assert result.exit_code == 2
        assert result.stdout == ""
        assert str(path) in result.stderr and case["path"] in result.stderr
        assert case["message"] in result.stderr
        assert "Traceback" not in result.stderr


def test_parse_json_rejects_nan_and_duplicates_with_path() -> None:
    with pytest.raises(ValueError, match="at /x/0: NaN"):
        parse_json('{"x": [NaN]}')
    with pytest.raises(ValueError, match="at /: duplicate object key 'a'"):
        parse_json('{"a": 1, "a": 1}')
    with pytest.raises(ValueError, match="at /l/1: duplicate object key 'b'"):
        parse_json('{"l": [{}, {"b": 1, "b": 2}]}')


def test_lone_surrogate_rejected() -> None:
    with pytest.raises(CanonicalError, match="lone surrogate") as info:
        canonical_bytes(parse_json('{"s": ["ok", "\\ud800"]}'))
    assert info.value.path == "/s/1"
    with pytest.raises(CanonicalError, match="lone surrogate"):
        canonical_bytes({"\udc00": 1})


def test_digest_form() -> None:
    d = digest({"b": 1, "a": [True, None]})
    assert is_digest(d)
    assert d == "sha256:" + hashlib.sha256(b'{"a":[true,null],"b":1}').hexdigest()
    assert not is_digest("sha256:" + "A" * 64)
    assert not is_digest("sha1:" + "0" * 64)


def test_cli_unreadable_and_malformed_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "missing.json"
    result = bench("canonicalize", missing)
    assert result.exit_code == 2 and str(missing) in result.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": [1,,]}')
    result = bench("digest", bad)
    assert result.exit_code == 2 and str(bad) in result.stderr and "not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------- fast path == reference encoder

_FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1e-4, 9.9999e-5, 1e16, 1e15 + 0.5, 2.0**53, -(2.0**53) - 2, 5e-324, 1e21, 0.1]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | _FLOATS
    | st.text()
    | st.sampled_from(["\u2028", "\x7f", "\x1f", "\ud800", "é€😀", "</script>"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_fast_path_equals_the_reference_encoder(value: object) -> None:
    # Digests, journal checks and result files all use the fast path; it must be RFC 8785 exactly,
    # and must fail where the reference fails (lone surrogates, unsafe integers).
    try:
        expected = canonical_bytes(value)
    except CanonicalError:
        with pytest.raises(CanonicalError):
            fast_canonical_bytes(value)
        return
    assert fast_canonical_bytes(value) == expected
    assert digest(value) == "sha256:" + hashlib.sha256(expected).hexdigest()


@given(st.integers(min_value=MAX_SAFE_INTEGER + 1) | st.integers(max_value=-MAX_SAFE_INTEGER - 1))
def test_fast_path_rejects_unsafe_integers(n: int) -> None:
    with pytest.raises(CanonicalError):
        fast_canonical_bytes({"n": [n]})
