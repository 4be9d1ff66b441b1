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
from runner.evaluator.protocol.matrix import Slot
from runner.evaluator.protocol.runfile import RunProtocol

from .outcomes import TerminalRecord, _Attempt, group_attempts, terminal_record

Registered = list[tuple[str, tuple[str, Slot]]]  # (cell id, (subject id, slot)), by cell id


class TerminalSpill:
    """Each subject's terminal records, spilled to a temporary file; use as a context manager."""

    def __init__(self) -> None:
        self._files: dict[str, IO[bytes]] = {}
        self.unregistered = False  # the evidence holds a cell the protocol does not register

    @classmethod
    def derive(
        cls, rp: RunProtocol, evidence: LoadedEvidence, registered: Registered
    ) -> TerminalSpill:
        """Consumes `registered` (emptied as it goes) and the evidence's cell stream."""
        spec = rp.spec()
        contracts = rp.contract_map()
        spill = cls()
        try:
            for cid, (subject_id, slot), attempts in spill._join(registered, evidence):
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
    ) -> Iterator[tuple[str, tuple[str, Slot], dict[int, _Attempt] | None]]:
        """Registered cells in cell-id order with their attempts (None: no record), flagging
        `unregistered`. Drains the evidence stream, so its root is known afterwards."""
        groups = iter(evidence.cell_groups())
        nxt: CellGroup | None = next(groups, None)
        prefix: str | None = None
        cells: dict[str, dict[int, _Attempt]] = {}
        registered.reverse()  # popped from the end: the list shrinks as cells are decided
        while registered:
            cid, where = registered.pop()
            if cid[7:23] != prefix:
                self.unregistered |= bool(cells)  # a previous group's cells nobody registered
                prefix, cells = cid[7:23], {}
                while nxt is not None and nxt[0] < prefix:
                    self.unregistered |= bool(group_attempts(nxt[1]))
                    nxt = next(groups, None)
                if nxt is not None and nxt[0] == prefix:
                    cells = group_attempts(nxt[1])
                    nxt = next(groups, None)
            yield cid, where, cells.pop(cid, None)
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
