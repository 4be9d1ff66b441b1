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

from .models import (
    AttemptGroup,
    Completion,
    DuplicateEffects,
    Measures,
    Ratio,
    RecoveryOverhead,
    RetrySplit,
)
from .stats import cluster_mean_interval, median_interval, proportion_interval

WITNESSED = frozenset({Status.COMPLETED, Status.FAILED})


def ratio(n: int, d: int) -> Ratio | None:
    return Ratio(numerator=n, denominator=d, value=round(n / d, 6)) if d else None


def rate(n: int, d: int) -> Ratio | None:
    """A proportion, with its exact Clopper-Pearson interval (stats.proportion_interval)."""
    if not d:
        return None
    return Ratio(
        numerator=n, denominator=d, value=round(n / d, 6), interval=proportion_interval(n, d)
    )


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
    # issue 25: per-task sums for the intervals over tasks, and the retry split
    task_extra: dict[str, list[int]] = field(default_factory=dict)  # task -> [sum, pairs]
    task_walls: dict[str, list[float]] = field(default_factory=dict)
    first_cells: int = 0
    first_completed: int = 0

    def add(
        self,
        status: Status,
        faulted: bool,
        dup: int,
        extra: int | None,
        wall: float | None,
        task: str = "",
        attempts: int = 1,
    ) -> None:
        """One cell: `extra`/`wall` are its differences to its baseline (None without one);
        they are counted only for a recovered cell, `dup` only for an exposed one. `task`
        clusters the overhead intervals; `attempts` > 1 means a retry decided the cell."""
        self.cells += 1
        self.completed += status is Status.COMPLETED
        self.pre_trigger += status is Status.SUBJECT_PRE_TRIGGER_FAILURE
        if attempts <= 1:
            self.first_cells += 1
            self.first_completed += status is Status.COMPLETED
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
                te = self.task_extra.setdefault(task, [0, 0])
                te[0] += extra
                te[1] += 1
                if wall is not None:
                    self.wall_ratios.append(wall)
                    self.task_walls.setdefault(task, []).append(wall)

    def overhead(self, seed: int) -> RecoveryOverhead | None:
        """None for a group without faulted cells: overhead is a measure of faulted cells.
        The mean's interval resamples tasks (bootstrap seeded by `seed`); the median's is the
        exact order-statistic interval over the tasks' median ratios."""
        if not self.faulted:
            return None
        r = self.wall_ratios
        mean = ratio(self.extra_tool_calls, self.pairs)
        if mean is not None:
            tasks = sorted(self.task_extra)
            ci = cluster_mean_interval(
                [self.task_extra[t][0] for t in tasks], [self.task_extra[t][1] for t in tasks], seed
            )
            mean = mean.model_copy(update={"interval": ci})
        walls = [statistics.median(v) for _, v in sorted(self.task_walls.items())]
        return RecoveryOverhead(
            pairs=self.pairs,
            missing_baseline=self.recovered - self.pairs,
            unrecovered=self.exposed - self.recovered,
            extra_tool_calls_total=self.extra_tool_calls if self.pairs else None,
            extra_tool_calls_mean=mean,
            wall_time_ratio_median=round(statistics.median(r), 4) if r else None,
            wall_time_ratio_median_interval=median_interval(walls),
        )

    def retry_split(self) -> RetrySplit:
        retried, retried_done = self.cells - self.first_cells, self.completed - self.first_completed
        return RetrySplit(
            first_attempt=AttemptGroup(
                cells=self.first_cells,
                completed=self.first_completed,
                rate=rate(self.first_completed, self.first_cells),
            ),
            after_retry=AttemptGroup(
                cells=retried, completed=retried_done, rate=rate(retried_done, retried)
            ),
        )

    def measures(self, listed: Collection[str], seed: int = 0) -> Measures:
        """Exactly the listed measures ([scoring].measures); the others are absent. `seed`:
        the bootstrap seed of the overhead interval (stats.seed_from the protocol hash)."""
        m: dict[str, Any] = {}
        if "completion" in listed:
            m["completion"] = Completion(
                completed=self.completed,
                cells=self.cells,
                pre_trigger_failures=self.pre_trigger,
                rate=rate(self.completed, self.cells),
            )
        if "duplicate_effects" in listed:
            m["duplicate_effects"] = DuplicateEffects(
                exposed_cells=self.exposed,
                duplicate_effects=self.duplicate_effects,
                cells_with_duplicates=self.cells_with_duplicates,
                share_without_duplicates=rate(
                    self.exposed - self.cells_with_duplicates, self.exposed
                ),
                duplicate_rate=rate(self.cells_with_duplicates, self.exposed),
            )
        if "recovery_overhead" in listed:
            m["recovery_overhead"] = self.overhead(seed)
        return Measures(**m)
