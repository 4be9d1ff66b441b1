"""`bench run SPEC`: resolve, check the freeze, run every cell, evaluate, publish or report."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
) -> None:
    """Run a spec's preregistered matrix and write evidence, then scorecards or reports."""
    from runner.orchestrate import run_spec

    outcome = run_spec(
        spec, out_dir, jobs=jobs, resume=resume, draft=draft, log=log, progress=cell_progress
    )
    run_dir = outcome.run_dir
    out.print(summary_table(outcome.results))
    comparison = run_dir / "results" / "comparison.md"
    if comparison.exists():
        out.print(comparison.read_text())
    out.print(f"results in {run_dir / 'results'}")
    if not outcome.complete:
        err.print("incomplete evidence: no scorecard for the subjects marked above")
        raise typer.Exit(EXIT_INCOMPLETE)
