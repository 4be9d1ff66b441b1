"""The evidence store of one run directory: hash-chained append-only journals and a blob store.

Each journal line is the RFC 8785 bytes of an envelope `{seq, prev, at_ns, record}`, where `prev`
is the digest of the previous line's bytes. A line is fsync'd before `append` returns, so a
writer that proceeds (e.g. starts recovery after a witness) knows the record is durable. A torn
last line (crash mid-write) is moved aside to `<journal>.torn-<n>` on reopen, never silently
dropped; earlier lines are never rewritten.

Layout: RUN_DIR/journals/<name>.jsonl, RUN_DIR/blobs/sha256/<hex>.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import BaseModel

from runner.evaluator.core.canonical import (
    canonical_bytes,
    fast_canonical_bytes,
    is_digest,
    sha256_digest,
)
from runner.evaluator.core.errors import EvidenceError

from .records import QuarantinedTail, Record, parse_record

JOURNALS = "journals"
BLOBS = "blobs/sha256"


@dataclass(frozen=True)
class Entry:
    seq: int
    prev: str | None
    at_ns: str
    record: Record
    line_digest: str
    leaf: str  # the record's evidence-root leaf (see `line_leaf`)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse_line(line: bytes, where: str) -> tuple[int, str | None, str, dict[str, Any]]:
    # Plain parsing is strict enough here: the line must equal the canonical re-encoding of what
    # was parsed, which a duplicate key, a NaN or any non-canonical spelling cannot.
    try:
        env = pydantic_core.from_json(line)
    except ValueError as exc:
        raise EvidenceError(f"{where}: not a JSON record ({exc})") from exc
    if not isinstance(env, dict) or set(env) != {"seq", "prev", "at_ns", "record"}:
        raise EvidenceError(f"{where}: not a journal envelope")
    try:
        canonical = fast_canonical_bytes(env)
    except ValueError as exc:
        raise EvidenceError(f"{where}: not a canonical record ({exc})") from exc
    if canonical != line:
        raise EvidenceError(f"{where}: line is not in canonical form (edited?)")
    # The envelope's own members have exact types: `line_leaf` relies on at_ns being a digit
    # string (an object there could hide a ',"prev":' and move the cut).
    seq, prev, at_ns, record = env["seq"], env["prev"], env["at_ns"], env["record"]
    if (
        type(seq) is not int
        or not (prev is None or (type(prev) is str and is_digest(prev)))
        or type(at_ns) is not str
        or not (0 < len(at_ns) <= 20 and at_ns.isascii() and at_ns.isdigit())
        or type(record) is not dict
    ):
        raise EvidenceError(f"{where}: not a journal envelope (member of the wrong type)")
    return seq, prev, at_ns, record


def line_leaf(line: bytes) -> str:
    """The evidence-root leaf of a canonical journal line: SHA-256 of the RFC 8785 bytes of
    `{"at_ns": ..., "record": ...}` (its position, seq and prev, left out on purpose).

    Canonical members are written in key order (at_ns, prev, record, seq) and a member's bytes do
    not depend on its siblings, so those bytes are the line without its prev and seq members: cut
    out, not re-encoded. Only for lines already checked to be canonical envelopes.
    """
    cut = line.index(b',"prev":')  # at_ns is a digit string: the first match is its end
    rec = line.index(b',"record":', cut)  # prev is null or a digest: no match inside it
    end = line.rindex(b',"seq":')  # seq is the last member
    h = hashlib.sha256(line[:cut])
    h.update(line[rec:end])
    h.update(b"}")
    return "sha256:" + h.hexdigest()


def read_journal(path: Path) -> Iterator[Entry]:
    """Yield verified entries; any broken chain, edit or torn line raises EvidenceError."""
    prev: str | None = None
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            where = f"{path}: line {n}"
            if not raw.endswith(b"\n"):
                raise EvidenceError(f"{where}: torn record (no newline; crashed mid-write?)")
            line = raw[:-1]
            seq, p, at_ns, body = _parse_line(line, where)
            if seq != n:
                raise EvidenceError(f"{where}: sequence number {seq}, expected {n}")
            if p != prev:
                raise EvidenceError(f"{where}: chain broken (prev does not match line {n - 1})")
            try:
                record = parse_record(body)
            except ValueError as exc:
                raise EvidenceError(f"{where}: invalid record: {exc}") from exc
            if record.model_dump(mode="json") != body:
                # The writer writes exactly model_dump(record): a coerced value or an omitted
                # default means the line was not written by it, and the evidence-root leaf
                # (cut from these bytes) would commit to something the evaluator did not read.
                raise EvidenceError(f"{where}: record not in its written form (edited?)")
            prev = sha256_digest(line)
            yield Entry(seq, p, at_ns, record, prev, line_leaf(line))


class Journal:
    """One append-only journal; thread-safe within a process."""

    def __init__(self, path: Path, clock: Callable[[], int] = time.time_ns) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._seq, self._prev, torn = self._recover()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _fsync_dir(path.parent)
        if torn is not None:
            data = torn.read_bytes()
            self.append(QuarantinedTail(file=torn.name, sha256=sha256_digest(data), size=len(data)))

    def _recover(self) -> tuple[int, str | None, Path | None]:
        if not self.path.exists():
            return 0, None, None
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1  # everything after the last newline is a torn record
        torn: Path | None = None
        if keep < len(data):
            n = 1
            while self.path.with_name(f"{self.path.name}.torn-{n}").exists():
                n += 1
            torn = self.path.with_name(f"{self.path.name}.torn-{n}")
            torn.write_bytes(data[keep:])
            os.sync()  # the torn bytes are durable elsewhere before we cut them here
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
                os.fsync(fh.fileno())
        seq, prev = 0, None
        for entry in read_journal(self.path):
            seq, prev = entry.seq, entry.line_digest
        return seq, prev, torn

    def append(self, record: BaseModel) -> str:
        """Durably append; returns the line digest. Returns only after fsync."""
        body = record.model_dump(mode="json")
        parse_record(body)  # only known record types enter a journal
        with self._lock:
            env = {
                "seq": self._seq + 1,
                "prev": self._prev,
                "at_ns": str(self._clock()),
                "record": body,
            }
            line = canonical_bytes(env)
            os.write(self._fd, line + b"\n")
            os.fsync(self._fd)
            self._seq += 1
            self._prev = sha256_digest(line)
            return self._prev

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EvidenceStore:
    """A run directory's journals and blobs."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        (run_dir / JOURNALS).mkdir(parents=True, exist_ok=True)
        (run_dir / BLOBS).mkdir(parents=True, exist_ok=True)

    def journal(self, name: str, clock: Callable[[], int] = time.time_ns) -> Journal:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad journal name {name!r}")
        return Journal(self.run_dir / JOURNALS / f"{name}.jsonl", clock)

    def journal_paths(self) -> list[Path]:
        return sorted((self.run_dir / JOURNALS).glob("*.jsonl"))

    def put_blob(self, data: bytes) -> str:
        address = sha256_digest(data)
        path = self.run_dir / BLOBS / address.removeprefix("sha256:")
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        return address

    def put_json_blob(self, value: Any) -> str:
        return self.put_blob(canonical_bytes(value))

    def get_blob(self, address: str) -> bytes:
        path = self.run_dir / BLOBS / address.removeprefix("sha256:")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise EvidenceError(f"blob {address} is missing") from exc
        if "sha256:" + hashlib.sha256(data).hexdigest() != address:
            raise EvidenceError(f"blob {address} does not match its address")
        return data

    def blob_paths(self) -> list[Path]:
        return sorted(p for p in (self.run_dir / BLOBS).iterdir() if not p.name.startswith("."))

    def entries(self) -> Iterator[tuple[str, Entry]]:
        for path in self.journal_paths():
            for entry in read_journal(path):
                yield path.stem, entry
