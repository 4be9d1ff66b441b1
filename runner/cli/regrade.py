"""`bench regrade RUN_DIR|BUNDLE [--out DIR]`: old evidence judged by this evaluator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.cli.display import summary_table


@app.command()
@guarded
def regrade(
    source: Annotated[Path, typer.Argument(help="a run directory or a published bundle")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="the new directory (default: SOURCE.regraded-<digest>)"),
    ] = None,
) -> None:
    """Re-evaluate old evidence under this evaluator into a NEW directory (SOURCE is only read);
    each new scorecard's derived_from names the source's scorecard, for `bench registry add`."""
    from runner.cli.reading import read_run
    from runner.regrading import regrade_and_sign

    read_run(source)  # SOURCE is only read: refused whole before anything is copied
    done = regrade_and_sign(source, out_dir, out.print)
    out.print(summary_table(done.results))
    for subject, old in sorted(done.derived_from.items()):
        out.print(f"{subject}: derived from {old}")
    out.print(f"regraded results in {done.out_dir / 'results'}")
    if any(r.scorecard is None for r in done.results.values()):
        err.print("incomplete evidence: no scorecard for the subjects marked above")
        raise typer.Exit(EXIT_INCOMPLETE)
