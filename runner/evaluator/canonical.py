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


class CanonicalError(ValueError):
    """The value cannot be canonicalized; `path` names where (JSON-pointer-like)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path or "/"
        super().__init__(f"at {self.path}: {message}")


def _check(value: Any, path: str) -> None:
    # Walk first so the error names the offending location; rfc8785 alone would not.
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
            _check(item, f"{path}/{_escape(key)}")
        return
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        for index, item in enumerate(value):
            _check(item, f"{path}/{index}")
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


def sha256_digest(data: bytes) -> str:
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """`sha256:<64 hex>` over the canonical bytes of `value`."""
    return sha256_digest(canonical_bytes(value))


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


def parse_json(text: str | bytes) -> Any:
    """Strict JSON parsing for hashed inputs: no NaN/Infinity, no duplicate keys.

    Both are rejected with a CanonicalError (a ValueError) naming the path.
    """
    raw = json.loads(text, parse_constant=_Constant, object_pairs_hook=_Pairs)
    return _build(raw, [])
