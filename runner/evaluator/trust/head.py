"""The signed head of an append-only log (the registry, a freeze log): the anchor that makes a
truncation or a rewrite detectable, even one with every hash chain recomputed.

`<log>.head.dsse.json` (registry.jsonl -> registry.head.dsse.json) is a DSSE envelope over an
in-toto Statement whose subject is the log's bytes up to `length` (its SHA-256) and whose
predicate says how long it was. Every writer re-signs it under the log's lock after appending;
a reader checks that the log is exactly the signed bytes. A log shorter than its head was
truncated; one whose signed prefix hashes otherwise was rewritten; one longer was appended to
without the key. Git history anchors the committed logs as well (tests/trust/
test_append_only_history.py: each commit's log is a prefix of the next one's).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError
from securesystemslib.signer import Key  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core.bounded import read_bounded, regular_stat
from runner.evaluator.core.types import Frozen

from .envelope import STATEMENT_TYPE, TrustError, open_statement_keys, subject_sha256
from .window import SIGNED_AT_PATTERN, check_window, exact, latest_recorded_at, now_signed_at

HEAD_PREDICATE = "urn:agent-fault-bench:predicate:append-only-head:v1"
MAX_LOG_BYTES = 1 << 30


class HeadPredicate(Frozen):
    length: int  # bytes of the log the head covers
    lines: int
    # when it was signed (UTC), held against the key's validity window; absent in older heads
    signed_at: Annotated[str, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    # SHA-256 (hex) of each line, newline included: set for freeze logs, so a refusal names
    # the first bad record; absent from the registry's heads (their bytes stay as they were).
    line_digests: list[str] | None = None


def head_path(log: Path) -> Path:
    return log.with_name(log.name.removesuffix(".jsonl") + ".head.dsse.json")


def _line_digests(data: bytes) -> list[str]:
    return [hashlib.sha256(line).hexdigest() for line in data.splitlines(keepends=True)]


def head_statement(log: Path, data: bytes, per_line: bool = False) -> dict[str, Any]:
    pred = HeadPredicate(
        length=len(data),
        lines=data.count(b"\n"),
        line_digests=_line_digests(data) if per_line else None,
        signed_at=now_signed_at(),
    )
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": log.name, "digest": {"sha256": hashlib.sha256(data).hexdigest()}}],
        "predicateType": HEAD_PREDICATE,
        "predicate": pred.model_dump(exclude_none=True),
    }


def _first_bad_record(log: Path, data: bytes, pred: HeadPredicate) -> str | None:
    """The first record of the log that is not the one its head signed (line digests)."""
    if pred.line_digests is None:
        return None
    have = _line_digests(data)
    for n, want in enumerate(pred.line_digests, start=1):
        if n > len(have):
            return (f"{log}: truncated: record {n} (of {len(pred.line_digests)} signed) is "
                    "missing")  # fmt: skip
        if have[n - 1] != want:
            return f"{log}: rewritten: record {n} is not the one its signed head covers"
    if len(have) > len(pred.line_digests):
        return (f"{log}: record {len(pred.line_digests) + 1} appended after its signed head, "
                "without the signing key")  # fmt: skip
    return None


def check_head(log: Path, trusted: Mapping[str, Key], allow_longer: bool = False) -> HeadPredicate:
    """The log is exactly the bytes its signed head covers; TrustError naming what changed.
    `allow_longer`: lines appended after the signed ones pass (sealing after a crash between
    an append and its head); the signed prefix must still hold."""
    head = head_path(log)
    if not head.exists():
        raise TrustError(
            f"{head}: missing: {log.name} has no signed head, so a truncation or rewrite could "
            "not be detected (`bench registry seal` or `bench freeze-seal` signs one)"
        )
    _, st, keys = open_statement_keys(head, trusted, HEAD_PREDICATE, "the signed head")
    try:
        pred = HeadPredicate.model_validate(st.get("predicate"))
    except ValidationError as exc:
        raise TrustError(f"{head}: not a head predicate: {exc.errors()[0]['msg']}") from exc
    signed = subject_sha256(st, str(head)).get(log.name)
    if not log.exists() and not log.is_symlink():
        raise TrustError(f"{log}: missing, though its signed head {head.name} covers "
                         f"{pred.lines} lines")  # fmt: skip
    data = read_bounded(log, MAX_LOG_BYTES, evidence=True)
    if pred.line_digests is not None and len(pred.line_digests) != pred.lines:
        raise TrustError(f"{head}: not a head predicate: {pred.lines} lines, "
                         f"{len(pred.line_digests)} line digests")  # fmt: skip
    named = _first_bad_record(log, data[: pred.length] if allow_longer else data, pred)
    if named is not None:
        raise TrustError(named)
    if len(data) < pred.length:
        raise TrustError(f"{log}: truncated: {len(data)} bytes, its signed head covers "
                         f"{pred.length} ({pred.lines} lines)")  # fmt: skip
    if hashlib.sha256(data[: pred.length]).hexdigest() != signed:
        raise TrustError(f"{log}: rewritten: its first {pred.length} bytes are not the ones its "
                         "signed head covers")  # fmt: skip
    if len(data) > pred.length and not allow_longer:
        extra = data[pred.length :].count(b"\n")
        raise TrustError(f"{log}: {extra} line(s) appended after its signed head, without the "
                         "signing key")  # fmt: skip
    when = (
        exact(pred.signed_at, "signed_at of the head")
        if pred.signed_at is not None
        else latest_recorded_at(data, f"the latest recorded_at of {log.name}")
    )
    if when is not None:  # an empty log signed before signed_at existed records no time
        check_window(keys, when, str(head))
    return pred


def freeze_anchor(
    trusted: Mapping[str, Key] | Callable[[], Mapping[str, Key]],
) -> Callable[[Path], None]:
    """The anchor of a spec's freeze log (protocol/freeze.py): the log is exactly what its
    signed head covers. A draft (neither log nor head) passes, without loading any key (`trusted`
    may be a loader); a log without its head, or a head without its log, is refused."""

    def anchor(log: Path) -> None:
        if os.path.lexists(log):
            regular_stat(log)  # a FIFO or a directory there is the user's to hear of (exit 2)
        if os.path.lexists(log) or os.path.lexists(head_path(log)):
            check_head(log, trusted() if callable(trusted) else trusted)

    return anchor


def freeze_prefix(trusted: Mapping[str, Key]) -> Callable[[Path], None]:
    """What `freeze.seal` checks first: an existing head's signed records are still there."""

    def prefix(log: Path) -> None:
        if os.path.lexists(head_path(log)):
            check_head(log, trusted, allow_longer=True)

    return prefix
