"""Stable hash sharding of a matrix's cells, so N independent hosts (a Kubernetes Indexed Job, a
Slurm array) each run a disjoint slice without talking to each other.

A cell belongs to shard ``i`` of ``N`` when the first 8 bytes of sha256(cell id), read big-endian,
are ``i`` modulo ``N``. The rule depends only on the cell id, never on the order or the size of the
matrix, so adding a task or re-running a shard never moves a cell to another shard.
"""

from __future__ import annotations

import hashlib
import re

from runner.evaluator.core.errors import InputError

_SHARD = re.compile(r"^(\d{1,9})/(\d{1,9})$")


def shard_of(cell_id: str, count: int) -> int:
    """The shard index (0..count-1) that ``cell_id`` falls in."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    digest = hashlib.sha256(cell_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def in_shard(cell_id: str, index: int, count: int) -> bool:
    """Whether ``cell_id`` belongs to shard ``index`` of ``count``."""
    return shard_of(cell_id, count) == index


def parse_shard(text: str, *, key: str = "--shard") -> tuple[int, int]:
    """Parse ``"i/N"`` (0 <= i < N) into ``(i, N)``; anything else is an InputError."""
    shown = text if len(text) <= 40 else text[:40] + "…"
    match = _SHARD.match(text.strip())
    if match is None:
        raise InputError(f"expected INDEX/COUNT such as 0/4, got {shown!r}", key=key)
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise InputError(f"shard count must be at least 1, got {shown!r}", key=key)
    if index >= count:
        raise InputError(
            f"shard index must be in 0..{count - 1} (indices start at 0), got {shown!r}", key=key
        )
    return index, count
