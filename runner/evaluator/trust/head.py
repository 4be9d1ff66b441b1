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
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError
from securesystemslib.signer import Key  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core.bounded import read_bounded
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


def head_path(log: Path) -> Path:
    return log.with_name(log.name.removesuffix(".jsonl") + ".head.dsse.json")


def head_statement(log: Path, data: bytes) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": log.name, "digest": {"sha256": hashlib.sha256(data).hexdigest()}}],
        "predicateType": HEAD_PREDICATE,
        "predicate": HeadPredicate(
            length=len(data), lines=data.count(b"\n"), signed_at=now_signed_at()
        ).model_dump(),
    }


def check_head(log: Path, trusted: Mapping[str, Key]) -> HeadPredicate:
    """The log is exactly the bytes its signed head covers; TrustError naming what changed."""
    head = head_path(log)
    if not head.exists():
        raise TrustError(
            f"{head}: missing: {log.name} has no signed head, so a truncation or rewrite could "
            "not be detected (`bench registry seal` signs one)"
        )
    _, st, keys = open_statement_keys(head, trusted, HEAD_PREDICATE, "the signed head")
    try:
        pred = HeadPredicate.model_validate(st.get("predicate"))
    except ValidationError as exc:
        raise TrustError(f"{head}: not a head predicate: {exc.errors()[0]['msg']}") from exc
    signed = subject_sha256(st, str(head)).get(log.name)
    data = read_bounded(log, MAX_LOG_BYTES, evidence=True)
    if len(data) < pred.length:
        raise TrustError(f"{log}: truncated: {len(data)} bytes, its signed head covers "
                         f"{pred.length} ({pred.lines} lines)")  # fmt: skip
    if hashlib.sha256(data[: pred.length]).hexdigest() != signed:
        raise TrustError(f"{log}: rewritten: its first {pred.length} bytes are not the ones its "
                         "signed head covers")  # fmt: skip
    if len(data) > pred.length:
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
