"""`bench reproduce BUNDLE [--rerun]`: re-derive a published result bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, EXIT_REFUSED, app, err, guarded, out
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.environment.hooks import environment_hook
from runner.evaluator.publish.reproduce import reproduce as reproduce_bundle


@app.command()
@guarded
def reproduce(
    bundle: Annotated[Path, typer.Argument(help="a result bundle (a run directory)")],
    rerun: Annotated[
        bool, typer.Option(help="also re-execute its matrix here and compare every cell")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="where a rerun goes")] = Path("runs"),
    jobs: Annotated[int, typer.Option(min=1, max=8)] = 1,
) -> None:
    """Say REPRODUCED only when every published result re-derives byte for byte."""
    if not (bundle / "protocol.json").is_file():
        raise InputError("not a result bundle (no protocol.json)", file=str(bundle))
    problems = reproduce_bundle(bundle, evaluator_digest(), environment_hook)
    if problems:
        err.print(f"[bold red]NOT REPRODUCED[/]: {problems[0]}")
        for p in problems[1:10]:
            err.print(f"  also: {p}")
        raise typer.Exit(EXIT_INCOMPLETE)
    n = sum(1 for p in (bundle / "results").rglob("*") if p.is_file())
    out.print(f"REPRODUCED {bundle}: {n} result files re-derive byte for byte")
    if not rerun:
        return
    from runner.cli.run import cell_progress, log
    from runner.orchestrate import rerun as rerun_bundle

    again = rerun_bundle(bundle, out_dir, jobs=jobs, log=log, progress=cell_progress)
    if again.refused:
        err.print("[bold red]rerun refused[/]: this machine does not conform to the bundle's:")
        for c in again.refused:
            err.print(f"  - {c}")
        raise typer.Exit(EXIT_REFUSED)
    if again.differing:
        first = again.differing[0]
        err.print(f"[bold red]RERUN DIFFERS[/] ({len(again.differing)} cells); first: {first}")
        raise typer.Exit(EXIT_INCOMPLETE)
    out.print(
        f"RERUN REPRODUCED: every cell's deterministic projection is identical ({again.run_dir})"
    )
