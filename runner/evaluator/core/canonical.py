"""Canonical bytes (RFC 8785 / JCS) and `sha256:` digests for every hashed object.

Integers must stay within ±(2**53 - 1) so that any JCS implementation (including ones that parse
numbers as IEEE doubles) produces the same bytes; nanosecond timestamps and large ids are strings.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

MAX_SAFE_INTEGER = 2**53 - 1
DIGEST_PREFIX = "sha256:"
# Arrays and objects nest at most this deep in any hashed or parsed value (README "Limits"):
# deeper input is an error naming where, never a RecursionError.
MAX_DEPTH = 128


class CanonicalError(ValueError):
    """The value cannot be canonicalized; `path` names where (JSON-pointer-like)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path or "/"
        super().__init__(f"at {self.path}: {message}")


def _too_deep(path: str) -> CanonicalError:
    return CanonicalError(path[:200], f"nested more than {MAX_DEPTH} levels deep")


def _check(value: Any, path: str, depth: int = 0) -> None:
    # Walk first so the error names the offending location; rfc8785 alone would not.
    if depth > MAX_DEPTH:
        raise _too_deep(path)
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise CanonicalError(
                path, f"integer {value} is outside ±(2^53-1); write large values as strings"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalError(path, f"{value} is not representable in JSON (RFC 8785)")
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError(path, f"object key {key!r} is not a string")
            _check_text(key, path)
            _check(item, f"{path}/{_escape(key)}", depth + 1)
        return
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        for index, item in enumerate(value):
            _check(item, f"{path}/{index}", depth + 1)
        return
    raise CanonicalError(path, f"type {type(value).__name__} has no JSON representation")


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalError(path, "string contains a lone surrogate (not valid UTF-8)") from exc


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 bytes of a JSON-compatible value; raises CanonicalError with a path."""
    _check(value, "")
    try:
        return bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError as exc:  # pragma: no cover - _check catches these first
        raise CanonicalError("", str(exc)) from exc


# ------------------------------------------------------------------------- fast canonical bytes


class _Slow(Exception):
    """The value leaves the domain where the fast encoder provably equals RFC 8785."""


JSON_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


def _jsonable(v: Any) -> Any:
    # Exact types only. On this domain the C JSON encoder writes RFC 8785 bytes:
    # - strings: both escape exactly " \\ \b \f \n \r \t (short form) and the other controls
    #   below 0x20 as lowercase \u00xx, and write everything else literally;
    # - object keys: ASCII only, so code-point order is UTF-16 code-unit order;
    # - integers: within +-(2^53-1), written as decimal digits by both;
    # - floats: an integral value within +-(2^53-1) is written as the integer (ECMAScript has no
    #   trailing ".0"; -0.0 becomes 0), a non-integral one with 1e-4 <= |v| < 1e16 is repr(v)
    #   in both (shortest round-trip digits, fixed notation); anything else goes the slow way.
    # Lone surrogates make the final UTF-8 encode fail, which also falls back.
    # (Plain scalars inside containers are checked inline: this walk is the hot path.)
    t = type(v)
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str or not k.isascii():
                raise _Slow
            tx = type(x)
            if (
                tx is str
                or tx is bool
                or x is None
                or (tx is int and -MAX_SAFE_INTEGER <= x <= MAX_SAFE_INTEGER)
            ):
                out[k] = x
            else:
                out[k] = _jsonable(x)
        return out
    if t is list:
        return [_jsonable(x) for x in v]
    if t is str or t is bool or v is None:
        return v
    if t is int:
        if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
            return v
        raise _Slow
    if t is float:
        if v.is_integer():
            if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                return int(v)
        elif 1e-4 <= abs(v) < 1e16:
            return v
    raise _Slow


def fast_canonical_bytes(value: Any) -> bytes:
    """The same bytes as `canonical_bytes`, several times faster on plain JSON documents.

    Values outside the proven-equal domain (see `_jsonable`) go through `canonical_bytes`, which
    also raises its usual errors for values that have no canonical form.
    """
    try:
        return JSON_ENCODER.encode(_jsonable(value)).encode("utf-8")
    except (_Slow, UnicodeEncodeError, RecursionError):  # deep values: _check names where
        return canonical_bytes(value)


def fast_digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(fast_canonical_bytes(value)).hexdigest()


def sha256_digest(data: bytes) -> str:
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """`sha256:<64 hex>` over the canonical bytes of `value` (via the fast path: same bytes)."""
    return sha256_digest(fast_canonical_bytes(value))


def is_digest(text: str) -> bool:
    hexpart = text.removeprefix(DIGEST_PREFIX)
    return (
        text.startswith(DIGEST_PREFIX)
        and len(hexpart) == 64
        and all(c in "0123456789abcdef" for c in hexpart)
    )


class _Constant:
    """NaN / Infinity / -Infinity as parsed: rejected with its path after parsing."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Pairs(list[tuple[str, Any]]):
    """An object's members as parsed, before duplicate keys are checked with their path."""


def _build(value: Any, trail: list[str]) -> Any:
    if len(trail) > MAX_DEPTH:
        raise _too_deep(_pointer(trail))
    if isinstance(value, _Pairs):
        out: dict[str, Any] = {}
        for key, item in value:
            if key in out:
                raise CanonicalError(_pointer(trail), f"duplicate object key {key!r}")
            trail.append(_escape(key))
            out[key] = _build(item, trail)
            trail.pop()
        return out
    if isinstance(value, list):
        items = []
        for index, item in enumerate(value):
            trail.append(str(index))
            items.append(_build(item, trail))
            trail.pop()
        return items
    if isinstance(value, _Constant):
        raise CanonicalError(_pointer(trail), f"{value.name} is not valid JSON")
    return value


def _pointer(trail: list[str]) -> str:
    return "".join("/" + t for t in trail)


# Byte-order marks and the zero-byte patterns of a BOM-less UTF-16/32 start (RFC 8259 §8.1's
# detection: a JSON text starts with an ASCII character). Longest first: UTF-32 LE's BOM begins
# with UTF-16 LE's.
_ENCODINGS = (
    (b"\x00\x00\xfe\xff", "UTF-32 BE (with a BOM)"),
    (b"\xff\xfe\x00\x00", "UTF-32 LE (with a BOM)"),
    (b"\xef\xbb\xbf", "UTF-8 with a BOM"),
    (b"\xfe\xff", "UTF-16 BE (with a BOM)"),
    (b"\xff\xfe", "UTF-16 LE (with a BOM)"),
)


def foreign_encoding(data: bytes) -> str | None:
    """The encoding a JSON text's bytes are in when it is not UTF-8 without a BOM (None when it
    may be UTF-8). RFC 8785 hashes UTF-8 bytes: an identity tool takes nothing else."""
    for bom, name in _ENCODINGS:
        if data.startswith(bom):
            return name
    head = data[:4]
    if len(head) == 4:
        if head[:3] == b"\x00\x00\x00" and head[3]:
            return "UTF-32 BE"
        if head[0] and head[1:] == b"\x00\x00\x00":
            return "UTF-32 LE"
    if len(head) >= 2:
        if head[0] == 0 and head[1]:
            return "UTF-16 BE"
        if head[0] and head[1] == 0:
            return "UTF-16 LE"
    return None


class EncodingError(ValueError):
    """JSON bytes in another encoding than UTF-8 without a BOM."""


def parse_json(text: str | bytes) -> Any:
    """Strict JSON parsing for hashed inputs: UTF-8 without a BOM (bytes), no NaN/Infinity, no
    duplicate keys.

    Each is rejected with a ValueError (CanonicalError naming the path, EncodingError naming the
    encoding found).
    """
    if isinstance(text, bytes | bytearray):
        found = foreign_encoding(bytes(text[:4]))
        if found is not None:
            raise EncodingError(f"encoded as {found}; only UTF-8 without a BOM is accepted")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EncodingError(f"not UTF-8 (invalid byte at offset {exc.start})") from exc
    elif text.startswith("\ufeff"):
        raise EncodingError("starts with a byte-order mark; only UTF-8 without a BOM is accepted")
    try:
        raw = json.loads(text, parse_constant=_Constant, object_pairs_hook=_Pairs)
    except RecursionError as exc:
        raise _too_deep("") from exc
    return _build(raw, [])
