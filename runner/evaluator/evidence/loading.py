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

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from runner.evaluator.core.errors import EvidenceError

from .hashing import EvidenceRoot
from .journal import EvidenceStore, read_journal
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
    def from_store(cls, store: EvidenceStore) -> LoadedEvidence:
        return _StreamedEvidence(store)


class _StreamedEvidence(LoadedEvidence):
    """A run directory's evidence: run-level journals read now, attempt journals streamed."""

    def __init__(self, store: EvidenceStore) -> None:
        self._leaves: EvidenceRoot | None = EvidenceRoot()
        self._attempt_paths: list[Path] = []
        env: list[EnvironmentRecorded] = []
        for path in store.journal_paths():
            if ATTEMPT_JOURNAL.fullmatch(path.stem):
                self._attempt_paths.append(path)
                continue
            for entry in read_journal(path):
                check_placement(path.stem, entry.record)
                self._leaves.add(entry.leaf)
                if isinstance(entry.record, EnvironmentRecorded):
                    env.append(entry.record)
        super().__init__([], "", env)
        self._root = None

    def cell_groups(self) -> Iterator[CellGroup]:
        """Single use: reading the attempt journals also completes the evidence root."""
        if self._leaves is None:
            raise RuntimeError("cell_groups() streams the journals once")
        leaves, self._leaves = self._leaves, None
        yield from _groups(self._journals(leaves))
        self._root = leaves.value()

    def _journals(self, leaves: EvidenceRoot) -> Iterator[tuple[str, list[Positioned]]]:
        for path in self._attempt_paths:
            name = path.stem
            records: list[Positioned] = []
            for entry in read_journal(path):
                check_placement(name, entry.record)
                leaves.add(entry.leaf)
                records.append((name, entry.seq, entry.record))
            yield name, records


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
