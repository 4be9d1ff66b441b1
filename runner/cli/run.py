"""`bench run SPEC`: resolve, check the freeze, run every cell, evaluate, publish or report.

`--only task=ID,fault=ID` runs a subset of the cells, always as a draft (runtime/cellselect.py);
a draft run prints its per-cell diagnostics ("draft: not a result"; evaluator/publish/diagnostics).
`--cluster tcp://HOST:PORT` runs the attempts on Dask workers (`bench worker`), showing cells per
worker and attempts in flight; `--shard i/N` runs one hash shard's cells and writes evidence only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
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

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.cli.evidence import summary_table


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


def log(line: str) -> None:
    out.print(line)


@app.command()
@guarded
def run(
    spec: Annotated[Path, typer.Argument(help="a spec file, e.g. specs/swe-lite.toml")],
    out_dir: Annotated[Path, typer.Option("--out", help="where run directories go")] = Path("runs"),
    jobs: Annotated[int, typer.Option(min=1, max=8, help="cells run in parallel")] = 1,
    resume: Annotated[
        Path | None, typer.Option(help="continue this interrupted run directory")
    ] = None,
    draft: Annotated[bool, typer.Option(help="allow a draft protocol (evidence only)")] = False,
    cluster: Annotated[
        str | None,
        typer.Option(help="run the attempts on this Dask scheduler's workers, tcp://HOST:PORT"),
    ] = None,
    resources: Annotated[
        str | None,
        typer.Option(help="with --cluster: what each attempt needs of a worker, e.g. NETNS=1"),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(help="run only shard i of N (i/N, 0 <= i < N): evidence, no evaluation"),
    ] = None,
    keep_subject_dirs: Annotated[
        bool,
        typer.Option(
            help="keep each attempt's subject state directory (the agent's stdout.log, "
            "stderr.log, events): for debugging an agent; not evidence, `bench sweep` removes it"
        ),
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="run only these cells, always as a draft (needs --draft): KEY=VALUE[,VALUE]"
            "[,KEY=...] with KEY task, fault (an id, or none/baseline), subject, seed; "
            "repeatable (keys AND, values of one key OR)",
        ),
    ] = None,
) -> None:
    """Run a spec's preregistered matrix and write evidence, then scorecards or reports."""
    from runner.evaluator.core.errors import InputError
    from runner.orchestrate import Cluster, Shard, run_spec
    from runner.scale.shard import parse_shard
    from runner.scale.worker_host import check_address, parse_resources

    where: Cluster | None = None
    view = None
    if cluster is not None:
        view = ClusterView()
        where = Cluster(check_address(cluster, "--cluster"), parse_resources(resources), view)
    elif resources is not None:
        raise InputError("--resources is what a cluster's workers must offer: give --cluster")
    if cluster is not None and jobs != 1:
        raise InputError("--jobs is for a local run; a cluster runs as many as it has workers")
    part = Shard(*parse_shard(shard)) if shard is not None else None
    outcome = run_spec(
        spec,
        out_dir,
        jobs=jobs,
        resume=resume,
        draft=draft,
        log=log,
        progress=view.progress if view is not None else cell_progress,
        cluster=where,
        shard=part,
        keep_subject_dirs=keep_subject_dirs,
        only=only or (),
    )
    run_dir = outcome.run_dir
    if outcome.subject_dirs is not None:
        out.print(f"subject state directories kept in {outcome.subject_dirs} (not evidence)")
    if outcome.shard is not None:
        s = outcome.shard
        out.print(
            f"shard {s.index}/{s.count}: {outcome.shard_cells} cells, evidence in {run_dir}"
            " (not evaluated: join the shards with `bench merge`)"
        )
        return
    out.print(summary_table(outcome.results))
    print_draft_diagnostics(run_dir)
    comparison = run_dir / "results" / "comparison.md"
    if comparison.exists():
        out.print(comparison.read_text())
    out.print(f"results in {run_dir / 'results'}")
    if not outcome.complete:
        err.print("incomplete evidence: no scorecard for the subjects marked above")
        raise typer.Exit(EXIT_INCOMPLETE)
