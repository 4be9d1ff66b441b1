"""Append-only, hash-chained JSONL logs (the freeze log, the registry): one canonical line per
record, appended with one O_APPEND write and an fsync, and read back as a chain in which every
record names the digest of the one before it (`previous_of`) and carries its own seal.

The caller holds the lock (a log has one writer at a time) and re-signs the log's head after an
append; the lines themselves are the records' canonical bytes, so an edit is visible.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .bounded import JSON_INPUT_CAP, read_bounded
from .canonical import canonical_bytes, digest, parse_json
from .errors import InputError

M = TypeVar("M", bound=BaseModel)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append `record` as one canonical line: a single O_APPEND write (never interleaved with
    another writer's line), then fsync, before the caller signs the new head."""
    line = canonical_bytes(record) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.write(fd, line) != len(line):
            raise OSError(f"{path}: short write")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_chain(
    path: Path,
    model: type[M],
    previous_of: Callable[[M], str | None],
    problem: Callable[[M, bytes, list[M]], str | None],
    *,
    what: str,
    chain: str,
) -> list[M]:
    """The log's records, each checked: it parses as `model`, `problem(record, line, before)`
    finds nothing wrong with it (its seal, its canonical bytes, its place), and it names the
    digest of the record before it. InputError naming the line otherwise ("damaged <what>: ...",
    "<chain> is broken here"). Read bounded: a FIFO or a huge file is refused, not read."""
    records: list[M] = []
    previous: str | None = None
    for n, line in enumerate(read_bounded(path, JSON_INPUT_CAP).splitlines(), start=1):
        try:
            rec = model.model_validate(parse_json(line))
        except (ValueError, ValidationError) as exc:
            raise InputError(f"damaged {what}: {exc}", file=str(path), line=n) from exc
        wrong = problem(rec, line, records)
        if wrong:
            raise InputError(f"damaged {what}: {wrong}", file=str(path), line=n)
        if previous_of(rec) != previous:
            raise InputError(f"{chain} is broken here", file=str(path), line=n)
        previous = digest(rec.model_dump(mode="json"))
        records.append(rec)
    return records
