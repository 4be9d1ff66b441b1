"""`bench canonicalize | digest`: a user's JSON file read bounded (a regular file, size-capped,
never blocking), parsed strictly, and put in RFC 8785 canonical bytes; every failure an
InputError naming the file."""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.core.bounded import JSON_INPUT_CAP, read_bounded
from runner.evaluator.core.canonical import CanonicalError, canonical_bytes, parse_json
from runner.evaluator.core.errors import InputError


def read_json(path: Path) -> object:
    data = read_bounded(path, JSON_INPUT_CAP)  # a regular file, size-capped, never blocks
    try:
        return parse_json(data)
    except ValueError as exc:  # includes invalid UTF-8 and nesting deeper than the limit
        raise InputError(f"not valid JSON: {exc}", file=str(path)) from exc


def canonical_file(path: Path) -> bytes:
    value = read_json(path)
    try:
        return canonical_bytes(value)
    except CanonicalError as exc:
        raise InputError(f"cannot canonicalize: {exc}", file=str(path)) from exc
