"""Re-derive a published result bundle from its evidence and compare bytes.

A bundle is a run directory (protocol.json, journals, blobs, results). Reproduction re-derives
every result file with *this* evaluator and requires byte equality with the published one; it
names the first differing field otherwise. The deterministic projection of a cell is what a
re-execution of the same matrix must reproduce byte for byte (measured quantities such as wall
time, and the evidence's own hashes and timestamps, are left out on purpose).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.evaluator.core.bounded import read_bounded
from runner.evaluator.core.canonical import canonical_bytes, parse_json
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.filesets import compare_sets
from runner.evaluator.evidence.layout import check as check_layout
from runner.evaluator.verdict.outcomes import TerminalRecord

from .results import DERIVED_VIEWS, RESULTS, derive, verify


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """JSON-pointer-like path of the first difference between two JSON values (sorted keys)."""
    if type(a) is not type(b):
        return path or "/"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k}"
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d is not None:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = first_difference(x, y, f"{path}/{i}")
            if d is not None:
                return d
        return f"{path}/{min(len(a), len(b))}" if len(a) != len(b) else None
    return None if a == b else (path or "/")


def describe(rel: str, published: bytes, derived: bytes) -> str:
    """Where a published file first differs from the derived one; a damaged published file
    (invalid JSON, not UTF-8) is named as such, never raised."""
    if rel.endswith(".json"):
        try:
            where = first_difference(parse_json(published), parse_json(derived))
        except (ValueError, RecursionError):
            return f"{rel}: bytes differ (not valid JSON)"
        if where is not None:
            return f"{rel}: first differing field {where}"
    if rel.endswith((".jsonl", ".md")):
        for n, (x, y) in enumerate(
            zip(published.splitlines(), derived.splitlines(), strict=False), 1
        ):
            if x != y:
                if rel.endswith(".jsonl"):
                    try:
                        where = first_difference(parse_json(x), parse_json(y))
                    except (ValueError, RecursionError):
                        return f"{rel}: line {n} differs (not valid JSON)"
                    return f"{rel}: line {n}, first differing field {where}"
                return f"{rel}: line {n} differs"
    return f"{rel}: bytes differ"


DESCRIBE_CAP = 64 << 20  # a differing published file larger than this is not read to describe


def reproduce(bundle: Path, evaluator_digest: str) -> list[str]:
    """Empty list when every published result re-derives byte for byte; else what differs."""
    # verify's byte differences of results files are named here again, field by field; every
    # other verify problem stands (a file merely *named* "differs" is not one of them).
    problems = [
        p
        for p in verify(bundle, evaluator_digest)
        if not (
            p.startswith(f"{RESULTS}/") and p.endswith(": differs from what the evidence derives")
        )
    ]
    layout, _, refused = check_layout(bundle)
    if refused:  # verify named them; nothing of the bundle is read past its layout
        return problems or refused
    try:
        _, _, derived = derive(bundle, evaluator_digest)
    except EvidenceError as exc:
        return [*problems, str(exc)] if str(exc) not in problems else problems
    # the published files as listed by lstat (no symlink, FIFO or oversized file is opened)
    published = {rel: layout.result_sizes[rel] for rel in layout.results}
    published = {rel: n for rel, n in published.items() if rel not in DERIVED_VIEWS}
    if not published:
        problems.append(f"{RESULTS}/: the bundle publishes no result")
    for rel, side in compare_sets(derived, published):
        if side == "present":
            problems.append(f"{rel}: published but not derivable from the evidence")
        elif side == "expected":
            problems.append(f"{rel}: derivable but not in the bundle")
        elif published[rel] > max(len(derived[rel]), DESCRIBE_CAP):
            problems.append(
                f"{rel}: bytes differ ({published[rel]} bytes, derived {len(derived[rel])})"
            )
        else:
            try:
                data = read_bounded(bundle / rel, published[rel], evidence=True)
            except EvidenceError as exc:
                problems.append(str(exc))
                continue
            if data != derived[rel]:
                problems.append(describe(rel, data, derived[rel]))
    return problems


MEASURED = ("wall_ns",)  # measured, not determined by the protocol and the subject


def projection(records: Iterable[TerminalRecord]) -> list[bytes]:
    """One canonical line per cell: what a re-execution must reproduce exactly."""
    lines = []
    for t in records:
        body = t.model_dump(mode="json", exclude=set(MEASURED))
        lines.append(canonical_bytes(body))
    return sorted(lines)
