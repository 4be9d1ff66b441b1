"""Every registered cell's terminal record, derived from evidence streamed one cell at a time.

The evidence yields its cells' records grouped by cell-id prefix, in prefix order
(`loading.LoadedEvidence.cell_groups`); the registered cells, sorted by cell id, are joined
against that stream, so only one group's records are alive at a time. A proof needs the
evidence root and the run's reasons (an unregistered cell is one), both known only at the end of
the stream, so each subject's terminal records are spilled, as their canonical lines in cell-id
order, to a temporary file and read back one at a time by `eligibility.decide_subject`.

A run directory's journals (`LoadedEvidence.from_store`) are read by `WORKERS` processes at
once, each over one range of cell ids (by the id's first byte: a contiguous range of journals and
of registered cells): each writes its subjects' terminal lines to its own files and packs its
leaves (`EvidenceRoot.export`); the ranges are in cell-id order, so a subject's files, taken in
range order, are its lines in cell-id order, and the root merges the leaves. The first error in
journal order is the one raised, as when read in one process.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import IO, Any

from runner.evaluator.evidence.hashing import SPILL_BYTES, EvidenceRoot, Export
from runner.evaluator.evidence.loading import CellGroup, LoadedEvidence, StreamedEvidence
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import Slot, cell_id
from runner.evaluator.protocol.runfile import RunProtocol

from .outcomes import TerminalRecord, _Attempt, group_attempts, terminal_line, terminal_record
from .told import derive_cell, ledger_items, needs_truth, truth_line

Registered = Iterator[tuple[str, str, Slot]]  # (cell id, subject id, slot), by cell id
INDEX_BYTES = 5  # a registration's index beside its cell id's 32 digest bytes
WORKERS = 2  # processes reading the journals of a run directory
PARALLEL_FROM = 4096  # attempt journals below which one process reads them all


class RegisteredIndex:
    """Every registered cell, packed: per cell its 32 raw digest bytes and its registration
    number, in 256 buffers by the first byte (hex order is byte order), each sorted only when its
    turn comes. At a million cells that is 37 MB instead of about 250 MB of str keys and tuples.
    """

    def __init__(self, rp: RunProtocol) -> None:
        self.rp = rp
        self.subjects = sorted(rp.identities.subject_config_hashes.items())
        n = len(rp.slots)
        buckets = [bytearray() for _ in range(256)]
        for si, (_, shash) in enumerate(self.subjects):
            for k, slot in enumerate(rp.slots):
                raw = cell_digest(slot.slot_id, shash)
                buckets[raw[0]] += raw + (si * n + k).to_bytes(INDEX_BYTES, "big")
        self.buckets = [bytes(b) for b in buckets]

    def cells(self, lo: int = 0, hi: int = 256) -> Registered:
        """The registered cells whose id's first byte is in [lo, hi), in cell-id order; a cell
        id registered twice (a duplicated slot) keeps its last registration."""
        n = len(self.rp.slots)
        width = 32 + INDEX_BYTES
        for b in range(lo, hi):
            data = self.buckets[b]
            rows = sorted([data[i : i + width] for i in range(0, len(data), width)])
            for j, row in enumerate(rows):
                if j + 1 < len(rows) and rows[j + 1][:32] == row[:32]:
                    continue  # registered again later: the later registration stands
                si, k = divmod(int.from_bytes(row[32:], "big"), n)
                yield "sha256:" + row[:32].hex(), self.subjects[si][0], self.rp.slots[k]


# printable ASCII but `"` and `\`: what RFC 8785 writes inside a string as it is
_VERBATIM = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*").fullmatch


def cell_digest(slot_id: str, subject_hash: str) -> bytes:
    """The 32 digest bytes of `matrix.cell_id(slot_id, subject_hash)`. When both strings are
    written verbatim (a digest is), its canonical document is `{"slot":"<id>","subject":"<hash>"}`
    (members in key order): hashed as such, not encoded; any other string takes `cell_id`."""
    if _VERBATIM(slot_id) and _VERBATIM(subject_hash):
        doc = b'{"slot":"%s","subject":"%s"}' % (slot_id.encode(), subject_hash.encode())
        return hashlib.sha256(doc).digest()
    return bytes.fromhex(cell_id(slot_id, subject_hash)[7:])


def registered_cells(rp: RunProtocol) -> Registered:
    """Every registered cell (cell id, subject id, slot) in cell-id order (`RegisteredIndex`)."""
    index = RegisteredIndex(rp)
    yield from index.cells()


class TerminalSpill:
    """Each subject's terminal records, spilled to temporary files; use as a context manager."""

    def __init__(self) -> None:
        self._files: dict[str, list[IO[bytes]]] = {}
        # each subject's truthfulness findings (verdict/told.py), in cell-id order; None when
        # not derived (no run directory to read ledgers from, or duplicates not scored)
        self._truth: dict[str, list[IO[bytes]]] | None = None
        self._dir: str | None = None  # the workers' files, when read in parallel
        self.unregistered = False  # the evidence holds a cell the protocol does not register

    @classmethod
    def derive(
        cls, rp: RunProtocol, evidence: LoadedEvidence, registered: Registered | RegisteredIndex
    ) -> TerminalSpill:
        """Consumes `registered` (`registered_cells` or a `RegisteredIndex`) and the evidence's
        cell stream; a run directory's journals are read by `WORKERS` processes."""
        spill = cls()
        try:
            if isinstance(registered, RegisteredIndex):
                if isinstance(evidence, StreamedEvidence) and evidence.parallel(PARALLEL_FROM):
                    spill._derive_parallel(rp, evidence, registered)
                    return spill
                registered = registered.cells()
            policy = _Policy(rp, evidence)
            if policy.truth:
                spill._truth = {}
            cells = ((c, s, _facts(slot)) for c, s, slot in registered)
            joined = _join(cells, evidence.cell_groups(), spill)
            _derive(policy, joined, spill._file, spill._truth_file)
        except BaseException:
            spill.close()
            raise
        return spill

    def _derive_parallel(
        self, rp: RunProtocol, evidence: StreamedEvidence, index: RegisteredIndex
    ) -> None:
        """Each worker gets, as files and bytes, its range's registered cells (cell id, subject,
        slot id, the index of its slot's (stratum, kind, parameters)) and journal names, and
        the policy: nothing of the protocol's many objects, which it would copy by reading."""
        self._dir = tempfile.mkdtemp(prefix="afb-terminals-")
        bounds = [256 * w // WORKERS for w in range(WORKERS + 1)]
        ranges = list(itertools.pairwise(bounds))
        classes: dict[tuple[str, str, int], int] = {}
        table: list[SlotFacts] = []
        for w, (lo, hi) in enumerate(ranges):
            with open(os.path.join(self._dir, f"{w}.cells"), "wb") as fh:
                chunk: list[tuple[str, str, str, int]] = []
                for cid, subject_id, slot in index.cells(lo, hi):
                    sched = slot.schedule
                    # equal parameters are one object after `runfile._share`; unshared, one
                    # class per slot: the same facts either way
                    key = (slot.stratum, sched.kind, id(sched.parameters))
                    n = classes.get(key)
                    if n is None:
                        n = classes[key] = len(table)
                        table.append(("", slot.stratum, sched.kind, sched.parameters))
                    chunk.append((cid, subject_id, slot.slot_id, n))
                    if len(chunk) >= CHUNK:
                        pickle.dump(chunk, fh, pickle.HIGHEST_PROTOCOL)
                        chunk = []
                pickle.dump(chunk, fh, pickle.HIGHEST_PROTOCOL)
        global _WORK
        policy = _Policy(rp, evidence)
        if policy.truth:
            self._truth = {}
        _WORK = (policy, table, evidence, evidence.ranges(bounds), self._dir)
        try:
            # (a worker that dies, e.g. killed for memory, breaks the pool: an error, not a hang)
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(WORKERS, mp_context=context) as pool:
                outs = list(pool.map(_worker, range(WORKERS)))
        finally:
            _WORK = None
        for out in outs:  # in range order: the first error in journal order is raised
            if isinstance(out, BaseException):
                raise out
        parts: list[Export] = []
        for w, (unregistered, subjects, export) in enumerate(outs):  # type: ignore[misc]
            self.unregistered |= unregistered
            parts.append(export)
            for subject_id in subjects:
                path = Path(self._dir) / f"{w}-{subject_id}"
                self._files.setdefault(subject_id, []).append(open(path, "rb"))  # noqa: SIM115
                truth = path.with_name(path.name + ".truth")
                if self._truth is not None and truth.exists():
                    self._truth.setdefault(subject_id, []).append(open(truth, "rb"))  # noqa: SIM115
        evidence.complete(parts)

    def _file(self, subject_id: str) -> IO[bytes]:
        if subject_id not in self._files:
            self._files[subject_id] = [tempfile.TemporaryFile(prefix="afb-terminal-")]  # noqa: SIM115
        return self._files[subject_id][0]

    def _truth_file(self, subject_id: str) -> IO[bytes]:
        assert self._truth is not None
        if subject_id not in self._truth:
            self._truth[subject_id] = [tempfile.TemporaryFile(prefix="afb-truth-")]  # noqa: SIM115
        return self._truth[subject_id][0]

    def truth_jsonl(self, subject_id: str) -> bytes | None:
        """A subject's truthfulness lines (`told.truth_line`) in cell-id order, read once;
        None when they were not derived."""
        if self._truth is None:
            return None
        return _read_all(self._truth.pop(subject_id, []))

    def lines(self, subject_id: str) -> Iterator[bytes]:
        """A subject's terminal lines (newline-ended) in cell-id order, one at a time (read
        once)."""
        files = self._files.pop(subject_id, [])
        try:
            for fh in files:
                fh.seek(0)
                yield from fh
        finally:
            for fh in files:
                fh.close()

    def jsonl(self, subject_id: str) -> bytes:
        """A subject's terminal lines as one bytes object (read once)."""
        return _read_all(self._files.pop(subject_id, []))

    def records(self, subject_id: str) -> Iterator[TerminalRecord]:
        """A subject's terminal records in cell-id order, one at a time (read once)."""
        for line in self.lines(subject_id):
            yield TerminalRecord.model_validate_json(line)

    def close(self) -> None:
        for files in [*self._files.values(), *(self._truth or {}).values()]:
            for fh in files:
                fh.close()
        self._files.clear()
        if self._truth:
            self._truth.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> TerminalSpill:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_all(files: list[IO[bytes]]) -> bytes:
    """The files' bytes, in order, as one bytes object; the files are closed."""
    try:
        parts = []
        for fh in files:
            fh.seek(0)
            parts.append(fh.read())
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        for fh in files:
            fh.close()


def _join(
    registered: Iterator[tuple[str, str, SlotFacts]],
    groups_in: Iterator[CellGroup],
    spill: TerminalSpill,
) -> Iterator[tuple[str, str, SlotFacts, dict[int, _Attempt] | None]]:
    """Registered cells in cell-id order with their attempts (None: no record), flagging
    `spill.unregistered`. Drains the group stream (a run directory's root is known after)."""
    groups = iter(groups_in)
    nxt: CellGroup | None = next(groups, None)
    prefix: str | None = None
    cells: dict[str, dict[int, _Attempt]] = {}
    for cid, subject_id, slot in registered:
        if cid[7:23] != prefix:
            spill.unregistered |= bool(cells)  # a previous group's cells nobody registered
            prefix, cells = cid[7:23], {}
            while nxt is not None and nxt[0] < prefix:
                spill.unregistered |= bool(group_attempts(nxt[1]))
                nxt = next(groups, None)
            if nxt is not None and nxt[0] == prefix:
                cells = group_attempts(nxt[1])
                nxt = next(groups, None)
        yield cid, subject_id, slot, cells.pop(cid, None)
    spill.unregistered |= bool(cells)
    while nxt is not None:
        spill.unregistered |= bool(group_attempts(nxt[1]))
        nxt = next(groups, None)


SlotFacts = tuple[str, str, str, dict[str, Any]]  # a slot's id, stratum, kind, parameters
CHUNK = 8192  # registered cells per pickled chunk of a worker's input
WORKER_SPILL_BYTES = SPILL_BYTES  # a worker's leaves held before a spill (less in tests)


def _facts(slot: Slot) -> SlotFacts:
    return slot.slot_id, slot.stratum, slot.schedule.kind, slot.schedule.parameters


class _Policy:
    """What deciding a cell needs of the protocol besides its slot."""

    def __init__(self, rp: RunProtocol, evidence: LoadedEvidence) -> None:
        spec = rp.spec()
        self.attempts = spec.attempts
        self.scorer_version = spec.scoring.scorer_version
        self.contracts = rp.contract_map()
        # The truthfulness findings (a duplicates measure, derived where the spec scores
        # duplicates) read the ledger blobs: evidence without its blobs derives none here.
        self.blobs = evidence.blobs
        self.truth = self.blobs is not None and "duplicate_effects" in spec.scoring.measures
        self.irreversible = frozenset(t.name for t in spec.tools if t.irreversible)
        self.triggers: dict[str, Any] = {}
        if self.truth:
            self.triggers = {s.slot_id: s.schedule.trigger for s in rp.slots}

    def truth_of(self, record: TerminalRecord, attempts: dict[int, _Attempt] | None) -> bytes:
        """The cell's truthfulness line, or b"" when it has no findings (`needs_truth`)."""
        status = record.status
        dup = max(0, (record.committed_effects or 0) - (record.intended_effects or 0))
        faulted = record.kind != NO_FAULT
        if status is None or not needs_truth(
            self.triggers[record.slot_id], status, faulted, dup, self.irreversible
        ):
            return b""
        n = next((a.attempt for a in record.attempts if a.status == status), None)
        if n is None:
            return b""
        a = (attempts or {}).get(n)
        told = a.told if a is not None else []
        ended = a.ended if a is not None else []
        ledger: list[dict[str, Any]] = []
        if len(ended) == 1 and ended[0].ledger is not None:
            assert self.blobs is not None
            ledger = ledger_items(self.blobs(ended[0].ledger))
        return truth_line(record.cell_id, derive_cell(told, ledger, self.irreversible))


def _derive(
    policy: _Policy,
    joined: Iterator[tuple[str, str, SlotFacts, dict[int, _Attempt] | None]],
    file: Any,
    truth_file: Any,
) -> None:
    for cid, subject_id, (slot_id, stratum, kind, params), attempts in joined:
        record = terminal_record(
            cid,
            slot_id,
            subject_id,
            stratum,
            kind,
            params,
            attempts,
            policy.attempts,
            policy.contracts.get(kind),
            policy.scorer_version,
        )
        file(subject_id).write(terminal_line(record) + b"\n")
        if policy.truth:
            line = policy.truth_of(record, attempts)
            if line:
                truth_file(subject_id).write(line)


# What the workers inherit through fork (set only while the pool runs).
_WORK: tuple[_Policy, list[SlotFacts], StreamedEvidence, list[bytes], str] | None = None


def _worker(w: int) -> tuple[bool, list[str], Export] | BaseException:
    """Range `w`: (unregistered, subjects with a file, packed leaves), or the exception that
    stopped it (re-raised by the parent, in range order)."""
    assert _WORK is not None
    policy, table, evidence, stems, out_dir = _WORK
    files: dict[str, IO[bytes]] = {}

    def file(subject_id: str) -> IO[bytes]:
        if subject_id not in files:
            files[subject_id] = open(os.path.join(out_dir, f"{w}-{subject_id}"), "wb")  # noqa: SIM115
        return files[subject_id]

    def truth_file(subject_id: str) -> IO[bytes]:
        key = f"{subject_id}.truth"
        if key not in truths:
            truths[key] = open(os.path.join(out_dir, f"{w}-{key}"), "wb")  # noqa: SIM115
        return truths[key]

    truths: dict[str, IO[bytes]] = {}

    def registered() -> Iterator[tuple[str, str, SlotFacts]]:
        with open(os.path.join(out_dir, f"{w}.cells"), "rb") as fh:
            while True:
                try:
                    chunk = pickle.load(fh)
                except EOFError:
                    return
                for cid, subject_id, slot_id, n in chunk:
                    _, stratum, kind, params = table[n]
                    yield cid, subject_id, (slot_id, stratum, kind, params)

    spill = TerminalSpill()
    leaves = EvidenceRoot(WORKER_SPILL_BYTES, spill_path=os.path.join(out_dir, f"{w}.leaves"))
    try:
        groups = evidence.range_groups(stems[w], leaves)
        _derive(policy, _join(registered(), groups, spill), file, truth_file)
        for fh in [*files.values(), *truths.values()]:
            fh.close()
        export = leaves.export()
        return spill.unregistered, sorted(files), export
    except BaseException as exc:  # handed to the parent as it is (or as its message)
        try:
            pickle.dumps(exc)
        except Exception:
            return RuntimeError(f"{type(exc).__name__}: {exc}")
        return exc
