"""Two sets of names (files, paths, blobs) held against each other: the one diff every check
that compares what should be against what is uses, so each names missing, unexpected and
shared entries in the same (sorted) order."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

Side = Literal["expected", "present", "both"]  # only expected (missing), only present, both


def compare_sets(expected: Collection[str], present: Collection[str]) -> list[tuple[str, Side]]:
    """Every name of either set, sorted, with where it is: `expected` only (missing),
    `present` only (unexpected), or `both` (for the caller to compare contents)."""
    want, have = set(expected), set(present)
    return [(name, _side(name in want, name in have)) for name in sorted(want | have)]


def _side(wanted: bool, had: bool) -> Side:
    return "both" if wanted and had else "expected" if wanted else "present"
