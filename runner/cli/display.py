"""What the commands show: the results table, a run's progress (one bar, or one row per worker
of a cluster), log lines. Display only: no command logic, no command module imported."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from runner.cli.app import out
from runner.evaluator.publish.results import SubjectResult


def summary_table(results: dict[str, SubjectResult]) -> Table:
    t = Table(title="results")
    cols = ("subject", "decision", "faults witnessed", "completion", "duplicate effects", "reasons")
    for col in cols:
        t.add_column(col)
    for subject, r in sorted(results.items()):
        p = r.evaluation.proof
        # witnessed / scheduled faults; baseline cells are not faults and are shown apart
        cov = f"{p.coverage.witnessed}/{p.coverage.scheduled} (+{p.coverage.baseline} baseline)"
        if r.scorecard is not None:
            c = r.scorecard.overall
            rate = c.completion.rate
            t.add_row(
                subject,
                "[green]publishable[/]",
                cov,
                f"{rate.numerator}/{rate.denominator}" if rate else "n/a",
                str(c.duplicate_effects.duplicate_effects),
                "",
            )
        else:
            shown = ", ".join(p.reason_codes[:4]) + (" ..." if len(p.reason_codes) > 4 else "")
            t.add_row(subject, "[red]incomplete evidence[/]", cov, "-", "-", shown)
    return t


@contextmanager
def cell_progress(total: int, completed: int) -> Iterator[Callable[[], None]]:
    """The progress display of a run: one bar over its cells."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as progress:
        bar = progress.add_task("cells", total=total, completed=completed)
        yield lambda: progress.advance(bar)


class ClusterView:
    """The progress of a cluster run: the cells bar, then one row per worker (cells finished
    there, attempts run, attempts in flight). Worker events arrive on Dask's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._rows: dict[str, tuple[TaskID, list[int]]] = {}  # worker -> (task, [cells, runs, now])

    @contextmanager
    def progress(self, total: int, completed: int) -> Iterator[Callable[[], None]]:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=out,
            transient=False,
        ) as progress:
            self._progress = progress
            bar = progress.add_task("cells", total=total, completed=completed, detail="")
            try:
                yield lambda: progress.advance(bar)
            finally:
                self._progress = None

    def _update(self, worker: str, cells: int, runs: int, now: int) -> None:
        progress = self._progress
        if progress is None:
            return
        with self._lock:
            if worker not in self._rows:
                task = progress.add_task(f"  worker {worker}", total=None, detail="")
                self._rows[worker] = (task, [0, 0, 0])
            task, counts = self._rows[worker]
            counts[0] += cells
            counts[1] += runs
            counts[2] = max(0, counts[2] + now)
            progress.update(
                task,
                completed=counts[0],
                detail=f"{counts[1]} attempts, {counts[2]} in flight",
            )

    def attempt_started(self, worker: str) -> None:
        self._update(worker, 0, 0, 1)

    def attempt_done(self, worker: str, cell_finished: bool) -> None:
        self._update(worker, int(cell_finished), 1, -1)


def log(line: str) -> None:
    out.print(line)
