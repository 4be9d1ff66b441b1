"""Draft / frozen lifecycle: an append-only freeze log beside the spec (`<spec>.freeze.jsonl`).

A protocol is a draft until a freeze record binds its protocol_hash. Any later change to a rule,
schema, contract or evaluator input gives a new protocol_hash; the log then says an amendment is
required, and `amend` appends one naming its parent. Records are never edited.

Writers are serialised: `freeze` and `amend` read the log, decide and append under an exclusive
`flock` on the log's directory (no lock file beside the spec), with one O_APPEND write and an
fsync per record, so racing freezes or amendments never interleave or fork the chain. Git
history anchors the committed logs (tests/trust/test_append_only_history.py), and a signed head
(`<spec>.freeze.head.dsse.json`, runner/evaluator/trust/head.py, with one digest per record)
anchors every log: the callers (`bench plan | freeze | amend | run`) pass an `anchor` that checks
the log against its head before a record is believed (a rewrite, a truncation or an unsigned
append is refused naming the first bad record; a log without a head is refused) and a `sealer`
that re-signs the head after every append. `seal` signs the head of a log that has none.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field

from runner.evaluator.core.appendlog import append_record, read_chain
from runner.evaluator.core.canonical import canonical_bytes, digest
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import Frozen

from .identities import Identities, verify


class ProtocolStatus(StrEnum):
    DRAFT = "draft"
    FROZEN = "frozen"
    AMENDMENT_REQUIRED = "amendment_required"


class FreezeRecord(Frozen):
    type: Literal["freeze", "amendment"]
    protocol_id: str
    protocol_version: str
    protocol_hash: str
    parent_protocol_hash: str | None
    reason: str
    identities: Identities
    recorded_at: str
    previous_record: str | None  # digest of the previous line: the log is a hash chain
    record_hash: str | None = Field(
        default=None, description="digest of this record without record_hash (in every log line)"
    )

    def body_digest(self) -> str:
        return digest(self.model_dump(mode="json", exclude={"record_hash"}))

    def sealed(self) -> FreezeRecord:
        return self.model_copy(update={"record_hash": self.body_digest()})


Anchor = Callable[[Path], object]  # raises (TrustError) unless the log is its signed head
Sealer = Callable[[Path], object]  # re-signs the log's head after an append


def log_path(spec_path: Path) -> Path:
    return spec_path.with_name(spec_path.stem + ".freeze.jsonl")


def read_log(spec_path: Path, anchor: Anchor | None = None) -> list[FreezeRecord]:
    path = log_path(spec_path)
    if anchor is not None:
        anchor(path)  # before a record is believed (a draft's absent log passes: no head)
    if not path.exists():
        return []
    return read_chain(
        path, FreezeRecord, lambda r: r.previous_record, _tampered,
        what="freeze record", chain="freeze log chain",
    )  # fmt: skip


def _tampered(rec: FreezeRecord, line: bytes, before: list[FreezeRecord]) -> str | None:
    if rec.record_hash is None or rec.record_hash != rec.body_digest():
        return "record_hash does not match the record (edited?)"
    if line != canonical_bytes(rec.model_dump(mode="json")):
        return "the line is not the record's canonical bytes (edited?)"
    if rec.protocol_hash != rec.identities.protocol_hash or not verify(rec.identities):
        return "protocol_hash is not the root of the recorded identities"
    if not before and (rec.type != "freeze" or rec.parent_protocol_hash is not None):
        return "the first record must be a freeze without a parent"
    if before and (rec.type != "amendment" or rec.parent_protocol_hash != before[-1].protocol_hash):
        return "an amendment must name the previous record's protocol_hash as its parent"
    return None


def status(
    spec_path: Path, ids: Identities, anchor: Anchor | None = None
) -> tuple[ProtocolStatus, FreezeRecord | None]:
    records = read_log(spec_path, anchor)
    if not records:
        return ProtocolStatus.DRAFT, None
    last = records[-1]
    if last.protocol_hash == ids.protocol_hash:
        return ProtocolStatus.FROZEN, last
    return ProtocolStatus.AMENDMENT_REQUIRED, last


@contextlib.contextmanager
def locked(spec_path: Path) -> Iterator[None]:
    """One writer of the spec's freeze log at a time (an exclusive flock on its directory)."""
    directory = log_path(spec_path).parent
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise InputError(f"cannot open the spec's directory: {exc.strerror}",
                         file=str(directory)) from exc  # fmt: skip
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _append(spec_path: Path, rec: FreezeRecord) -> None:
    append_record(log_path(spec_path), rec.model_dump(mode="json"))


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def freeze(
    spec_path: Path,
    ids: Identities,
    reason: str = "initial freeze",
    *,
    anchor: Anchor | None = None,
    sealer: Sealer | None = None,
) -> FreezeRecord:
    with locked(spec_path):
        rec = _freeze(spec_path, ids, reason, anchor)
        if sealer is not None:
            sealer(log_path(spec_path))  # re-signed after every append (and re-freeze: no-op)
        return rec


def _freeze(spec_path: Path, ids: Identities, reason: str, anchor: Anchor | None) -> FreezeRecord:
    state, last = status(spec_path, ids, anchor)
    if state is ProtocolStatus.FROZEN:
        assert last is not None
        return last
    if state is ProtocolStatus.AMENDMENT_REQUIRED:
        raise InputError(
            "this protocol was frozen with another protocol_hash; record the change with "
            "`bench amend SPEC --reason ...`",
            file=str(spec_path),
        )
    rec = FreezeRecord(
        type="freeze",
        protocol_id=ids.protocol_id,
        protocol_version=ids.protocol_version,
        protocol_hash=ids.protocol_hash,
        parent_protocol_hash=None,
        reason=reason,
        identities=ids,
        recorded_at=_now(),
        previous_record=None,
    ).sealed()
    _append(spec_path, rec)
    return rec


def amend(
    spec_path: Path,
    ids: Identities,
    reason: str,
    *,
    anchor: Anchor | None = None,
    sealer: Sealer | None = None,
) -> FreezeRecord:
    if not reason.strip():
        raise InputError("an amendment needs a --reason", file=str(spec_path))
    with locked(spec_path):
        rec = _amend(spec_path, ids, reason, anchor)
        if sealer is not None:
            sealer(log_path(spec_path))
        return rec


def seal(spec_path: Path, sealer: Sealer, prefix: Anchor | None = None) -> list[FreezeRecord]:
    """Sign the head of a freeze log that has none (the logs frozen before heads existed), or
    whose head a crash left behind an append: every record's seal and the chain must hold, and
    `prefix` (when given) checks that what an existing head signed is still there."""
    path = log_path(spec_path)
    with locked(spec_path):
        if not path.exists():
            raise InputError("no freeze log to seal (a draft)", file=str(path))
        if prefix is not None:
            prefix(path)
        records = read_log(spec_path)
        sealer(path)
        return records


def _amend(spec_path: Path, ids: Identities, reason: str, anchor: Anchor | None) -> FreezeRecord:
    records = read_log(spec_path, anchor)
    if not records:
        raise InputError("this protocol is a draft; freeze it first", file=str(spec_path))
    last = records[-1]
    if last.protocol_hash == ids.protocol_hash:
        raise InputError("nothing to amend: the protocol is unchanged", file=str(spec_path))
    rec = FreezeRecord(
        type="amendment",
        protocol_id=ids.protocol_id,
        protocol_version=ids.protocol_version,
        protocol_hash=ids.protocol_hash,
        parent_protocol_hash=last.protocol_hash,
        reason=reason,
        identities=ids,
        recorded_at=_now(),
        previous_record=digest(last.model_dump(mode="json")),
    ).sealed()
    _append(spec_path, rec)
    return rec
