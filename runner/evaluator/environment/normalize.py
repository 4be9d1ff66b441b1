"""Versioned normalizers for controlled-factor values, by `name@version` (DESIGN §7).

A source contract names the normalizer it was read with; the conformance check recomputes the
normalized value from the raw one with that same normalizer, so a recorded value is never trusted.
A normalizer's behaviour never changes under its version: a change is a new `@version`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


def _identity(v: Any) -> Any:
    return v


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not text")
    return v


def _lower(v: Any) -> Any:
    return _text(v).strip().lower()


def _strip(v: Any) -> Any:
    return _text(v).strip()


_VERSION = re.compile(r"(\d+)(?:\.(\d+))?")


def _major_minor(v: Any) -> Any:
    m = _VERSION.search(_text(v))
    if not m or m.group(2) is None:
        raise ValueError(f"no major.minor version in {v!r}")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def _major(v: Any) -> Any:
    m = _VERSION.search(_text(v))
    if not m:
        raise ValueError(f"no version number in {v!r}")
    return str(int(m.group(1)))


def _mib(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a byte count")
    return v // (1024 * 1024)


def _gib(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a byte count")
    return round(v / 1024**3)


NORMALIZERS: Mapping[str, Callable[[Any], Any]] = {
    "identity@1": _identity,
    "lower@1": _lower,
    "strip@1": _strip,
    "major_minor@1": _major_minor,
    "major@1": _major,
    "mib@1": _mib,
    "gib@1": _gib,
}


def normalize(normalizer: str, raw: Any) -> Any:
    """Apply a normalizer by `name@version`; KeyError if unknown, ValueError if it rejects `raw`."""
    return NORMALIZERS[normalizer](raw)
