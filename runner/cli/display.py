"""What the commands show: the results table, a run's progress (one bar, or one row per worker
of a cluster), log lines. Display only: no command logic, no command module imported."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape
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


def print_draft_diagnostics(run_dir: Path) -> bool:
    """Print a draft run's per-cell diagnostics (results/draft-diagnostics.jsonl): a table, then
    each cell's last output line (unwrapped, to be read or copied whole). False for a frozen run
    (no such file). Read back from the file the evaluator wrote: what is shown is evidence."""
    from runner.evaluator.core.bounded import RESULT_FILE_CAP, read_bounded
    from runner.evaluator.publish.diagnostics import (
        DIAGNOSTICS_FILE,
        DRAFT_NOTE,
        CellDiagnostic,
        exit_text,
        last_line,
    )

    path = run_dir / "results" / DIAGNOSTICS_FILE
    if not path.is_file():
        return False
    rows = [
        CellDiagnostic.model_validate_json(line)
        for line in read_bounded(path, RESULT_FILE_CAP).splitlines()
        if line
    ]
    table = Table(
        title=f"[bold yellow]{DRAFT_NOTE}[/]: per-cell diagnostics",
        caption="no rate, no aggregate, no scorecard: freeze the spec and run it whole for that",
    )
    for col in ("subject", "task", "fault", "seed", "status"):
        table.add_column(col, overflow="fold", min_width=4 if col == "seed" else 8)
    # short values, kept whole (the ids fold instead): witnessed, effects committed/intended,
    # tool calls, model calls, each launch's exit
    for col in ("witn.", "effects", "tools", "model", "exit"):
        table.add_column(col, no_wrap=True)

    def num(v: object) -> str:
        return "-" if v is None else str(v)

    lines = []
    for r in rows:
        # never got going: no call of any kind, and no launch or a launch that exited non-zero
        silent = not r.model_calls and not r.tool_calls
        failed = not r.launches or any(x.exit_code not in (0, None) for x in r.launches)
        style = "bold red" if silent and failed else ("green" if r.status == "COMPLETED" else "")
        table.add_row(
            r.subject_id, r.task_id, r.fault_id, str(r.seed), num(r.status),
            "-" if r.witnessed is None else ("yes" if r.witnessed else "no"),
            f"{num(r.committed_effects)}/{num(r.intended_effects)}",
            num(r.tool_calls), num(r.model_calls), exit_text(r.launches), style=style,
        )  # fmt: skip
        last = last_line(r.launches)
        if last:
            lines.append((f"{r.subject_id} · {r.task_id} · {r.fault_id} · seed {r.seed}", last))
    out.print(table)
    for where, last in lines:
        out.print(f"[bold]{escape(where)}[/]: {escape(last[:400])}", soft_wrap=True)
    out.print(f"{DRAFT_NOTE}: every line in {path} (and .md)", soft_wrap=True)
    return True
