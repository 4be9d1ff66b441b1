"""The evidence store of one run directory: hash-chained append-only journals and a blob store.

Each journal line is the RFC 8785 bytes of an envelope `{seq, prev, at_ns, record}`, where `prev`
is the digest of the previous line's bytes. A line is fsync'd before `append` returns, so a
writer that proceeds (e.g. starts recovery after a witness) knows the record is durable. A torn
last line (crash mid-write) is moved aside to `<journal>.torn-<n>` on reopen, never silently
dropped; earlier lines are never rewritten.

The order of an attempt journal's records is bound without a signature too: `seq` is the line's
position, and `at_ns` never decreases from one line to the next (the writer holds its clock to
that; `read_verified` checks it), so records reordered with the chain and the sequence numbers
recomputed are refused unless every timestamp is forged as well. The run's own journal
(`run.jsonl`) is exempt: `bench merge` concatenates the run journals of shards that ran at the
same time. An attempt journal is created with its first record: one with none is refused.

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
    MAX_SAFE_INTEGER,
    canonical_bytes,
    fast_canonical_bytes,
    is_digest,
    sha256_digest,
)
from runner.evaluator.core.errors import EvidenceError

from .records import RECORD_ADAPTER, QuarantinedTail, Record, parse_record
from .templates import _CELL, _SLOT, _TEMPLATES, _cut, _remember, _with_cell

JOURNALS = "journals"
BLOBS = "blobs/sha256"
RUN_JOURNAL_FILE = "run.jsonl"


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
    for seq, prev, at_ns, record, line_digest, leaf in read_verified(path):
        yield Entry(seq, prev, at_ns, record, line_digest, "sha256:" + leaf.hex())


Verified = tuple[int, str | None, str, Record, str, bytes]  # seq, prev, at_ns, record, digest, leaf


def read_verified(path: Path | str) -> Iterator[Verified]:
    """`read_journal`'s entries as tuples, each leaf as its 32 raw digest bytes: the evaluator's
    hot path (about 12 M lines at a million cells), with the same checks and the same errors.

    Each line is first tried by `_fast_line`, which accepts a line only when every check of
    `_checked_line` (the reference) provably passes; any line it does not accept takes the
    reference path, which accepts it or raises the precise error.
    """
    prev: str | None = None
    prev_member = b"null"  # `prev` as the JSON member the next line must hold
    ordered = os.path.basename(path) != RUN_JOURNAL_FILE  # module docstring
    last_ns = 0
    with open(path, "rb") as fh:  # a str path too: no Path object per journal on the hot path
        data = fh.read()
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty unless the last record is torn
    if torn:
        lines.append(torn)
    for n, line in enumerate(lines, start=1):
        if torn and n == len(lines):
            raise EvidenceError(f"{path}: line {n}: torn record (no newline; crashed mid-write?)")
        fast = _fast_line(line, n, prev_member)
        if fast is not None:
            at_ns, record, leaf = fast
            p = prev
        else:
            p, at_ns, record, leaf = _checked_line(line, n, prev, f"{path}: line {n}")
        if ordered:
            now = int(at_ns)
            if now < last_ns:
                raise EvidenceError(
                    f"{path}: line {n}: at_ns {at_ns} is earlier than line {n - 1}'s "
                    "(records out of order?)"
                )
            last_ns = now
        hexed = hashlib.sha256(line).hexdigest()
        prev = "sha256:" + hexed
        prev_member = b'"sha256:' + hexed.encode() + b'"'
        yield n, p, at_ns, record, prev, leaf


_HEAD = b'{"at_ns":"'
_RECORD = b',"record":'


def _fast_line(line: bytes, seq: int, prev_member: bytes) -> tuple[str, Record, bytes] | None:
    """(at_ns, record, leaf) when the line is provably the canonical envelope
    `{"at_ns":A,"prev":P,"record":R,"seq":seq}` of a valid record in its written form, with
    `P` the expected prev member; None when this cannot be shown cheaply (never an error).

    Why this is exactly `_checked_line`'s acceptance on such lines: the envelope's members are
    compared as bytes (A a digit string of 1-20 digits, P and seq the expected ones), so the line
    is the canonical envelope iff R is the RFC 8785 form of its parse D. R is: it is ASCII
    without a \\u escape (so every string is ASCII and every escape a short one, written alike
    by RFC 8785 and pydantic), pydantic's compact JSON of D in D's own member order gives R back
    (so no whitespace, no duplicate key, no other spelling), every object's keys are in sorted
    order and every number is an integer within +-(2^53-1) (`_plain`: no float, whose spellings
    differ). The record checks are the reference's own: validated, and dumped back to D.
    """
    if not line.startswith(_HEAD):
        return None
    j = line.find(b'"', 10)
    at_ns = line[10:j]
    if j < 0 or not (0 < len(at_ns) <= 20 and at_ns.isdigit()):
        return None
    mid = b'","prev":' + prev_member + _RECORD
    if not line.startswith(mid, j):
        return None
    tail = b',"seq":%d}' % seq
    if not line.endswith(tail):
        return None
    r = line[j + len(mid) : len(line) - len(tail)]
    c = r.find(_CELL) + len(_CELL)  # where the cell id's digest starts (if it has one)
    s = r.find(_SLOT, c + 71) if c >= len(_CELL) else -1  # and a slot id's, after it
    s = s + len(_SLOT) if s >= 0 else -1
    seen = _TEMPLATES.get(_cut(r, c, s)) if c >= len(_CELL) else None
    try:
        if seen is not None and seen[0] == c and seen[1] == s:
            # R is the template's R (ASCII, no \u escape) with other 71 bytes where its digests
            # were, which the validator takes only as digests: ASCII, no backslash, so no \u
            # escape across any edge (the bytes before each end in a quote).
            slot = r[s : s + 71].decode() if s >= 0 else None
            record = _with_cell(seen[2], r[c : c + 71].decode(), slot)
        elif not r.isascii() or b"\\u" in r:
            return None
        else:
            body = pydantic_core.from_json(r)
            if type(body) is not dict or pydantic_core.to_json(body) != r or not _plain(body):
                return None
            record = RECORD_ADAPTER.validate_python(body)
            if record.model_dump(mode="json") != body:
                return None
            _remember(r, c, s, record)
    except (ValueError, RecursionError):
        return None
    h = hashlib.sha256(line[: j + 1])  # the leaf: `line_leaf`, from the members already cut
    h.update(_RECORD)
    h.update(r)
    h.update(b"}")
    return at_ns.decode(), record, h.digest()


def _plain(value: dict[str, Any]) -> bool:
    """Every object (this one and those inside) has its keys in sorted order, and every number
    is an integer within +-(2^53-1): the values on which pydantic's compact JSON is RFC 8785."""
    keys = list(value)
    if keys != sorted(keys):
        return False
    for v in value.values():
        t = type(v)
        if t is str or t is bool or v is None:
            continue
        if t is int:
            if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                return False
        elif t is dict:
            if not _plain(v):
                return False
        elif t is list:
            if not _plain_list(v):
                return False
        else:
            return False
    return True


def _plain_list(items: list[Any]) -> bool:
    for v in items:
        t = type(v)
        if t is str or t is bool or v is None:
            continue
        if t is int:
            if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                return False
        elif t is dict:
            if not _plain(v):
                return False
        elif t is list:
            if not _plain_list(v):
                return False
        else:
            return False
    return True


def _checked_line(
    line: bytes, n: int, prev: str | None, where: str
) -> tuple[str | None, str, Record, bytes]:
    """The reference check of line `n` (expected prev `prev`): (prev, at_ns, record, leaf)."""
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
    return p, at_ns, record, bytes.fromhex(line_leaf(line)[7:])


class Journal:
    """One append-only journal; thread-safe within a process."""

    def __init__(self, path: Path, clock: Callable[[], int] = time.time_ns) -> None:
        self.path = path
        self._clock = clock
        # The default clock is the wall clock, which may step back: held non-decreasing (module
        # docstring). A clock handed in (a merge copying recorded times, a test) is taken as is.
        self._hold = clock is time.time_ns
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._last_ns = 0
        self._seq, self._prev, torn = self._recover()
        # A new journal is created by its first append: a journal file never exists empty.
        self._fd = -1
        self._closed = False
        if path.exists():
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND, 0o600)
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
            self._last_ns = max(self._last_ns, int(entry.at_ns))
        return seq, prev, torn

    def append(self, record: BaseModel) -> str:
        """Durably append; returns the line digest. Returns only after fsync."""
        body = record.model_dump(mode="json")
        parse_record(body)  # only known record types enter a journal
        with self._lock:
            now = self._clock()
            if self._hold:
                now = max(now, self._last_ns)
            self._last_ns = now
            env = {
                "seq": self._seq + 1,
                "prev": self._prev,
                "at_ns": str(now),
                "record": body,
            }
            line = canonical_bytes(env)
            if self._closed:
                raise ValueError(f"{self.path}: journal is closed")
            created = self._fd < 0
            if created:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(self._fd, line + b"\n")
            os.fsync(self._fd)
            if created:
                _fsync_dir(self.path.parent)
            self._seq += 1
            self._prev = sha256_digest(line)
            return self._prev

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EvidenceStore:
    """A run directory's journals and blobs. `create=False`: a reader's view, which creates
    nothing (a read-only command never writes into its input)."""

    def __init__(self, run_dir: Path, create: bool = True) -> None:
        self.run_dir = run_dir
        if create:
            (run_dir / JOURNALS).mkdir(parents=True, exist_ok=True)
            (run_dir / BLOBS).mkdir(parents=True, exist_ok=True)

    def journal(self, name: str, clock: Callable[[], int] = time.time_ns) -> Journal:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad journal name {name!r}")
        return Journal(self.run_dir / JOURNALS / f"{name}.jsonl", clock)

    def journal_paths(self) -> list[Path]:
        d = self.run_dir / JOURNALS
        return [d / n for n in self.journal_names()]

    def journal_names(self) -> list[str]:
        """The journals' file names in name order (`glob("*.jsonl")`, sorted, without a million
        Path objects and their comparisons: in one directory, name order is Path order)."""
        return sorted(n for n in os.listdir(self.run_dir / JOURNALS) if n.endswith(".jsonl"))

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
        return read_blob(self.run_dir, address)

    def blob_paths(self) -> list[Path]:
        return sorted(p for p in (self.run_dir / BLOBS).iterdir() if not p.name.startswith("."))

    def entries(self) -> Iterator[tuple[str, Entry]]:
        for path in self.journal_paths():
            for entry in read_journal(path):
                yield path.stem, entry


def read_blob(run_dir: Path, address: str) -> bytes:
    """The blob at `address` in RUN_DIR/blobs, checked against its address."""
    path = run_dir / BLOBS / address.removeprefix("sha256:")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvidenceError(f"blob {address} is missing") from exc
    if "sha256:" + hashlib.sha256(data).hexdigest() != address:
        raise EvidenceError(f"blob {address} does not match its address")
    return data
