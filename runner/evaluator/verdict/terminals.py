"""Every registered cell's terminal record, derived from evidence streamed one cell at a time.

The evidence yields its cells' records grouped by cell-id prefix, in prefix order
(`loading.LoadedEvidence.cell_groups`); the registered cells, sorted by cell id, are joined
against that stream, so only one group's records are alive at a time. A proof needs the
evidence root and the run's reasons (an unregistered cell is one), both known only at the end of
the stream, so each subject's terminal records are spilled, as their canonical lines in cell-id
order, to a temporary file and read back one at a time by `eligibility.decide_subject`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO, Any

from runner.evaluator.evidence.hashing import terminal_line
from runner.evaluator.evidence.loading import CellGroup, LoadedEvidence
from runner.evaluator.protocol.matrix import Slot, cell_id
from runner.evaluator.protocol.runfile import RunProtocol

from .outcomes import TerminalRecord, _Attempt, group_attempts, terminal_record

Registered = Iterator[tuple[str, str, Slot]]  # (cell id, subject id, slot), by cell id
INDEX_BYTES = 5  # a registration's index beside its cell id's 32 digest bytes


def registered_cells(rp: RunProtocol) -> Registered:
    """Every registered cell (cell id, subject id, slot) in cell-id order; a cell id registered
    twice (a duplicated slot) keeps its last registration.

    The index is packed: per cell its 32 raw digest bytes and its registration number, in 256
    buffers by the first byte (hex order is byte order), each sorted only when its turn comes.
    At a million cells that is 37 MB instead of about 250 MB of str keys and tuples.
    """
    subjects = sorted(rp.identities.subject_config_hashes.items())
    n = len(rp.slots)
    buckets = [bytearray() for _ in range(256)]
    for si, (_, shash) in enumerate(subjects):
        for k, slot in enumerate(rp.slots):
            raw = bytes.fromhex(cell_id(slot.slot_id, shash)[7:])
            buckets[raw[0]] += raw + (si * n + k).to_bytes(INDEX_BYTES, "big")
    width = 32 + INDEX_BYTES
    for b in range(256):
        data = bytes(buckets[b])
        buckets[b] = bytearray()
        rows = sorted([data[i : i + width] for i in range(0, len(data), width)])
        del data
        for j, row in enumerate(rows):
            if j + 1 < len(rows) and rows[j + 1][:32] == row[:32]:
                continue  # registered again later: the later registration stands
            si, k = divmod(int.from_bytes(row[32:], "big"), n)
            yield "sha256:" + row[:32].hex(), subjects[si][0], rp.slots[k]


class TerminalSpill:
    """Each subject's terminal records, spilled to a temporary file; use as a context manager."""

    def __init__(self) -> None:
        self._files: dict[str, IO[bytes]] = {}
        self.unregistered = False  # the evidence holds a cell the protocol does not register

    @classmethod
    def derive(
        cls, rp: RunProtocol, evidence: LoadedEvidence, registered: Registered
    ) -> TerminalSpill:
        """Consumes `registered` (see `registered_cells`) and the evidence's cell stream."""
        spec = rp.spec()
        contracts = rp.contract_map()
        spill = cls()
        try:
            for cid, subject_id, slot, attempts in spill._join(registered, evidence):
                record = terminal_record(
                    cid,
                    slot.slot_id,
                    subject_id,
                    slot.stratum,
                    slot.schedule.kind,
                    slot.schedule.parameters,
                    attempts,
                    spec.attempts,
                    contracts.get(slot.schedule.kind),
                    spec.scoring.scorer_version,
                )
                spill._file(subject_id).write(terminal_line(record) + b"\n")
        except BaseException:
            spill.close()
            raise
        return spill

    def _join(
        self, registered: Registered, evidence: LoadedEvidence
    ) -> Iterator[tuple[str, str, Slot, dict[int, _Attempt] | None]]:
        """Registered cells in cell-id order with their attempts (None: no record), flagging
        `unregistered`. Drains the evidence stream, so its root is known afterwards."""
        groups = iter(evidence.cell_groups())
        nxt: CellGroup | None = next(groups, None)
        prefix: str | None = None
        cells: dict[str, dict[int, _Attempt]] = {}
        for cid, subject_id, slot in registered:
            if cid[7:23] != prefix:
                self.unregistered |= bool(cells)  # a previous group's cells nobody registered
                prefix, cells = cid[7:23], {}
                while nxt is not None and nxt[0] < prefix:
                    self.unregistered |= bool(group_attempts(nxt[1]))
                    nxt = next(groups, None)
                if nxt is not None and nxt[0] == prefix:
                    cells = group_attempts(nxt[1])
                    nxt = next(groups, None)
            yield cid, subject_id, slot, cells.pop(cid, None)
        self.unregistered |= bool(cells)
        while nxt is not None:
            self.unregistered |= bool(group_attempts(nxt[1]))
            nxt = next(groups, None)

    def _file(self, subject_id: str) -> IO[bytes]:
        if subject_id not in self._files:
            self._files[subject_id] = tempfile.TemporaryFile(prefix="afb-terminal-")  # noqa: SIM115
        return self._files[subject_id]

    def records(self, subject_id: str) -> Iterator[TerminalRecord]:
        """A subject's terminal records in cell-id order, one at a time (read once)."""
        fh = self._files.pop(subject_id, None)
        if fh is None:
            return
        with fh:
            fh.seek(0)
            for line in fh:
                yield TerminalRecord.model_validate_json(line)

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()

    def __enter__(self) -> TerminalSpill:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
