"""`bench regrade RUN_DIR|BUNDLE [--out DIR]`: old evidence judged by this evaluator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.cli.display import summary_table
from runner.evaluator.core.inputs import evaluator_digest


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
    from runner.evaluator.publish.regrade import default_out
    from runner.evaluator.publish.regrade import regrade as regrade_run

    read_run(source)  # SOURCE is only read: refused whole before anything is copied
    digest = evaluator_digest()
    done = regrade_run(source, out_dir or default_out(source, digest), digest)
    out.print(summary_table(done.results))
    for subject, old in sorted(done.derived_from.items()):
        out.print(f"{subject}: derived from {old}")
    out.print(f"regraded results in {done.out_dir / 'results'}")
    from runner.signing.sign import sign_if_keyed

    sign_if_keyed(done.out_dir, out.print)
    if any(r.scorecard is None for r in done.results.values()):
        err.print("incomplete evidence: no scorecard for the subjects marked above")
        raise typer.Exit(EXIT_INCOMPLETE)
