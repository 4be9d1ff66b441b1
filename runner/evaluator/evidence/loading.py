"""A run's evidence as the evaluator reads it: its environment records, its cells' records one
cell at a time, and the evidence root.

Evidence is streamed, not held: each attempt has its own journal, named `<cell id prefix>-a<n>`
(`runtime.attempt.api.journal_name`: the cell id's first 16 hex digits), so in sorted name order
a cell's journals are adjacent, and `cell_groups` yields the records of one prefix's journals at a
time, in prefix order (= cell-id order). The grouping is exact because it is checked: every record
of an attempt journal must carry the cell id and attempt number its name promises (a journal's
quarantined-tail record excepted), and no other journal may hold a cell's record; anything else
is an EvidenceError. Two cells sharing a prefix share one group (grouped by full id downstream).

Journals of no attempt (`run`, ...) are small and are read up front, so their environment
records are known before the cells are streamed; every leaf, theirs and the attempts', goes into
the evidence root (`hashing.EvidenceRoot`), which is known once `cell_groups` is exhausted.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from runner.evaluator.core.errors import EvidenceError

from .hashing import EvidenceRoot, Export
from .journal import JOURNALS, EvidenceStore, read_journal, read_verified
from .records import EnvironmentRecorded, QuarantinedTail, Record

Positioned = tuple[str, int, Record]  # (journal name, seq, record)
CellGroup = tuple[str, list[Positioned]]  # (cell id prefix, its journals' records)

ATTEMPT_JOURNAL = re.compile(r"([0-9a-f]{16})-a([1-9][0-9]*)")


def check_placement(journal: str, record: Record) -> None:
    """A record is in the journal its cell and attempt name (or, with no cell, in none of them)."""
    m = ATTEMPT_JOURNAL.fullmatch(journal)
    cell = getattr(record, "cell_id", None)
    if m is None:
        if cell is not None:
            raise EvidenceError(f"journal {journal} holds a record of cell {cell} (not its own)")
        return
    if cell is None:
        if not isinstance(record, QuarantinedTail):
            raise EvidenceError(f"attempt journal {journal} holds a {record.type} record")
        return
    if cell[7:23] != m[1] or record.attempt != int(m[2]):  # type: ignore[union-attr]
        raise EvidenceError(
            f"attempt journal {journal} holds a record of cell {cell} attempt {record.attempt}"  # type: ignore[union-attr]
        )


class LoadedEvidence:
    """A run's evidence held in memory (positioned records and their root), e.g. for tests;
    `from_store` streams a run directory's journals instead."""

    def __init__(self, entries: list[Positioned], root: str, env: list[EnvironmentRecorded]):
        self._entries = entries
        self._root: str | None = root
        self.environment = env

    @property
    def evidence_root_hash(self) -> str:
        if self._root is None:
            raise RuntimeError("the evidence root is known once cell_groups() is exhausted")
        return self._root

    def cell_groups(self) -> Iterator[CellGroup]:
        """Each attempt-journal prefix's records, in prefix order (journals in name order,
        records in seq order), after checking every record's placement."""
        by_journal: dict[str, list[Positioned]] = defaultdict(list)
        for entry in self._entries:
            check_placement(entry[0], entry[2])
            by_journal[entry[0]].append(entry)
        names = sorted(by_journal)
        return _groups((n, sorted(by_journal[n], key=lambda e: e[1])) for n in names)

    @classmethod
    def from_store(cls, store: EvidenceStore, names: list[str] | None = None) -> LoadedEvidence:
        """`names`: the store's `journal_names()`, when the caller has listed them already."""
        return StreamedEvidence(store, names)


class StreamedEvidence(LoadedEvidence):
    """A run directory's evidence: run-level journals read now, attempt journals streamed."""

    def __init__(self, store: EvidenceStore, names: list[str] | None = None) -> None:
        self._leaves: EvidenceRoot | None = EvidenceRoot()
        self.run_dir = store.run_dir
        self._dir = store.run_dir / JOURNALS
        self._attempts: list[str] = []  # attempt journals' stems, in name order
        env: list[EnvironmentRecorded] = []
        for name in store.journal_names() if names is None else names:
            stem = name[: -len(".jsonl")]
            if ATTEMPT_JOURNAL.fullmatch(stem):
                self._attempts.append(stem)
                continue
            for entry in read_journal(self._dir / name):
                check_placement(stem, entry.record)
                self._leaves.add(entry.leaf)
                if isinstance(entry.record, EnvironmentRecorded):
                    env.append(entry.record)
        super().__init__([], "", env)
        self._root = None

    def cell_groups(self) -> Iterator[CellGroup]:
        """Single use: reading the attempt journals also completes the evidence root."""
        leaves = self._take()
        yield from _groups(self._journals(leaves, self._attempts))
        self._root = leaves.value()

    def _take(self) -> EvidenceRoot:
        if self._leaves is None:
            raise RuntimeError("cell_groups() streams the journals once")
        leaves, self._leaves = self._leaves, None
        return leaves

    def _journals(
        self, leaves: EvidenceRoot, stems: Iterable[str]
    ) -> Iterator[tuple[str, list[Positioned]]]:
        where = f"{self._dir}/"  # str(self._dir / name), without a Path per journal
        for stem in stems:
            yield stem, _attempt_records(f"{where}{stem}.jsonl", stem, leaves)

    # Reading in parallel (verdict/terminals.py): each process streams one range of cell ids
    # (`range_groups`, with its own leaves), the parent completes the root from their exports.
    # A range's journals are handed over as one bytes object (`ranges`), so a forked process
    # reads none of the parent's objects (each one read would be copied into it).

    def parallel(self, threshold: int) -> bool:
        """Whether there are enough attempt journals to read them in parallel."""
        return self._leaves is not None and len(self._attempts) >= threshold

    def ranges(self, bounds: list[int]) -> list[bytes]:
        """Per range [bounds[i], bounds[i+1]) of first cell-id bytes, its attempt journals'
        stems, newline-separated (a stem is hex digits, `-a` and digits)."""
        starts = [bisect.bisect_left(self._attempts, f"{b:02x}") for b in bounds[:-1]]
        ends = [*starts[1:], len(self._attempts)]
        return ["\n".join(self._attempts[a:b]).encode() for a, b in zip(starts, ends, strict=True)]

    def range_groups(self, stems: bytes, leaves: EvidenceRoot) -> Iterator[CellGroup]:
        """`cell_groups` of one range's journals (`ranges`), their leaves added to `leaves`
        (not to this evidence's root: see `complete`)."""
        names = stems.decode().split("\n") if stems else []
        return _groups(self._journals(leaves, names))

    def complete(self, parts: list[Export]) -> None:
        """The root over the run-level leaves and every range's (`EvidenceRoot.export`)."""
        self._root = self._take().value(parts)


def attempt_records(path: Path, leaves: EvidenceRoot) -> list[Positioned]:
    """One attempt journal's verified records, each checked in place (`check_placement`, the
    journal's name parsed once), their leaves added to `leaves`."""
    return _attempt_records(path, path.stem, leaves)


def _attempt_records(path: Path | str, name: str, leaves: EvidenceRoot) -> list[Positioned]:
    m = ATTEMPT_JOURNAL.fullmatch(name)
    if m is None:
        raise ValueError(f"not an attempt journal: {name}")
    prefix, attempt = m[1], int(m[2])
    records: list[Positioned] = []
    digests: list[bytes] = []
    for seq, _, _, record, _, leaf in read_verified(path):
        cell = getattr(record, "cell_id", None)
        if cell is None or cell[7:23] != prefix or record.attempt != attempt:  # type: ignore[union-attr]
            check_placement(name, record)  # the precise error, or a quarantined tail
        digests.append(leaf)
        records.append((name, seq, record))
    leaves.add_digests(digests)  # once the journal is read whole: an error adds none of them
    return records


def _groups(journals: Iterable[tuple[str, list[Positioned]]]) -> Iterator[CellGroup]:
    """Merge consecutive attempt journals (in name order) sharing a cell prefix."""
    prefix: str | None = None
    group: list[Positioned] = []
    for name, records in journals:
        m = ATTEMPT_JOURNAL.fullmatch(name)
        if m is None:
            continue
        if m[1] != prefix:
            if prefix is not None:
                yield prefix, group
            prefix, group = m[1], []
        group.extend(records)
    if prefix is not None:
        yield prefix, group
