"""Per-cell rows files: one canonical JSON object per line, built from terminal lines fast.

A rows file is the bulk of a result's bytes at a million cells, so its rows are written by
pydantic's compact JSON wherever that provably gives the RFC 8785 bytes (see `row_bytes`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core

from runner.evaluator.core.canonical import MAX_SAFE_INTEGER, fast_canonical_bytes

from .models import RowsFile


def parse_line(line: bytes) -> Any:
    """A terminal line as plain JSON: they are the evaluator's own canonical TerminalRecord JSON
    (outcomes.terminal_line), so their values are in the domain `row_bytes` relies on."""
    return pydantic_core.from_json(line)


def row_bytes(row: dict[str, Any]) -> bytes:
    """RFC 8785 bytes of a row built from a terminal line's values, with its members (and those
    of every object inside it) inserted in sorted key order.

    pydantic's JSON keeps insertion order and writes strings as RFC 8785 does (see
    outcomes.terminal_line). The row's strings and integers come from canonical lines (valid
    UTF-8, within +-(2^53-1)); a top-level float is written directly when it is non-integral
    within 1e-4 <= |v| < 1e16 (the same shortest digits as RFC 8785 there; property-tested),
    as an integer when integral and safe. Anything else takes the checked path.
    """
    for k, v in row.items():
        if type(v) is float:
            if v.is_integer():
                if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                    return fast_canonical_bytes(row)
                row[k] = int(v)  # RFC 8785 writes an integral number without ".0"
            elif not 1e-4 <= abs(v) < 1e16:
                return fast_canonical_bytes(row)
        elif type(v) is int and not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
            return fast_canonical_bytes(row)
    try:
        return pydantic_core.to_json(row)
    except ValueError:  # not serializable as given (e.g. a lone surrogate): the checked path
        return fast_canonical_bytes(row)


def rows_file(name: str, rows: list[bytes]) -> tuple[bytes, RowsFile]:
    """The file's bytes (each row ended by a newline) and the RowsFile that binds them.

    Callers drop `rows` right after: at a million cells it is the largest thing they hold.
    """
    data = b"\n".join([*rows, b""])  # each row newline-ended, no per-row copy on the way
    sha = "sha256:" + hashlib.sha256(data).hexdigest()
    return data, RowsFile(file=name, lines=len(rows), sha256=sha)
