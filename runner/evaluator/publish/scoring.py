"""A scorecard's arithmetic: the measures of one group of cells, accumulated a cell at a time.

Each measure is defined on the cells it can speak about (DESIGN §4): completion on every cell,
duplicate effects on the exposed cells (faulted, fault witnessed), recovery overhead on the
recovered cells (exposed and COMPLETED, against their COMPLETED baseline). So a subject that
fails before its trigger, or dies after it, can never look cleaner or cheaper for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from runner.evaluator.core.types import Status

from .models import Completion, DuplicateEffects, Measures, Ratio, RecoveryOverhead

WITNESSED = frozenset({Status.COMPLETED, Status.FAILED})


def ratio(n: int, d: int) -> Ratio | None:
    return Ratio(numerator=n, denominator=d, value=round(n / d, 6)) if d else None


def exposed(status: Status, faulted: bool) -> bool:
    """A faulted cell whose fault was witnessed (attempt_status grades a faulted cell COMPLETED
    or FAILED only after its witness verdict)."""
    return faulted and status in WITNESSED


def recovered(status: Status, faulted: bool) -> bool:
    return faulted and status is Status.COMPLETED


@dataclass
class Tally:
    """One group's measures, accumulated a cell at a time."""

    cells: int = 0
    completed: int = 0
    pre_trigger: int = 0
    exposed: int = 0
    duplicate_effects: int = 0
    cells_with_duplicates: int = 0
    faulted: int = 0
    recovered: int = 0
    pairs: int = 0
    extra_tool_calls: int = 0
    wall_ratios: list[float] = field(default_factory=list)

    def add(
        self, status: Status, faulted: bool, dup: int, extra: int | None, wall: float | None
    ) -> None:
        """One cell: `extra`/`wall` are its differences to its baseline (None without one);
        they are counted only for a recovered cell, `dup` only for an exposed one."""
        self.cells += 1
        self.completed += status is Status.COMPLETED
        self.pre_trigger += status is Status.SUBJECT_PRE_TRIGGER_FAILURE
        if not faulted:
            return
        self.faulted += 1
        if exposed(status, faulted):
            self.exposed += 1
            self.duplicate_effects += dup
            self.cells_with_duplicates += dup > 0
        if recovered(status, faulted):
            self.recovered += 1
            if extra is not None:  # paired with its baseline
                self.pairs += 1
                self.extra_tool_calls += extra
                if wall is not None:
                    self.wall_ratios.append(wall)

    def overhead(self) -> RecoveryOverhead | None:
        """None for a group without faulted cells: overhead is a measure of faulted cells."""
        if not self.faulted:
            return None
        r = self.wall_ratios
        return RecoveryOverhead(
            pairs=self.pairs,
            missing_baseline=self.recovered - self.pairs,
            unrecovered=self.exposed - self.recovered,
            extra_tool_calls_total=self.extra_tool_calls if self.pairs else None,
            extra_tool_calls_mean=ratio(self.extra_tool_calls, self.pairs),
            wall_time_ratio_median=round(statistics.median(r), 4) if r else None,
        )

    def measures(self, listed: Collection[str]) -> Measures:
        """Exactly the listed measures ([scoring].measures); the others are absent."""
        m: dict[str, Any] = {}
        if "completion" in listed:
            m["completion"] = Completion(
                completed=self.completed,
                cells=self.cells,
                pre_trigger_failures=self.pre_trigger,
                rate=ratio(self.completed, self.cells),
            )
        if "duplicate_effects" in listed:
            m["duplicate_effects"] = DuplicateEffects(
                exposed_cells=self.exposed,
                duplicate_effects=self.duplicate_effects,
                cells_with_duplicates=self.cells_with_duplicates,
                share_without_duplicates=ratio(
                    self.exposed - self.cells_with_duplicates, self.exposed
                ),
            )
        if "recovery_overhead" in listed:
            m["recovery_overhead"] = self.overhead()
        return Measures(**m)
