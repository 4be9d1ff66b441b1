"""`bench run SPEC`: resolve, check the freeze, run every cell, evaluate, publish or report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.cli.evidence import evaluate_and_write, summary_table
from runner.evaluator.core.inputs import project_root
from runner.runtime.executor import MatrixRun


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
    from runner.runtime.host import naming, sweep

    if resume is not None:
        mrun = MatrixRun.resume(spec, resume)
        leftovers = sweep.sweep(prefix_filter=mrun.rp.run_id)
        if leftovers.removed_anything:
            out.print(f"removed leftovers: {leftovers.model_dump(exclude_defaults=True)}")
    else:
        mrun = MatrixRun.create(spec, out_dir, naming.new_run_id(), allow_draft=draft)
    run_dir = run_matrix(mrun, jobs)
    results = evaluate_and_write(run_dir)
    out.print(summary_table(results))
    comparison = run_dir / "results" / "comparison.md"
    if comparison.exists():
        out.print(comparison.read_text())
    out.print(f"results in {run_dir / 'results'}")
    if any(r.scorecard is None for r in results.values()):
        err.print("incomplete evidence: no scorecard for the subjects marked above")
        raise typer.Exit(EXIT_INCOMPLETE)


def run_matrix(mrun: MatrixRun, jobs: int) -> Path:
    """Execute every unfinished cell of a prepared run, with a progress display."""
    from runner.imagebuild import builder as images
    from runner.runtime import envcollect
    from runner.runtime.attempt import run as attempt
    from runner.runtime.executor import execute

    run_dir, run_id = mrun.run_dir, mrun.rp.run_id
    out.print(f"run {run_id} in {run_dir}")
    image_name = mrun.spec.grader.image or "swe-lite"
    built = images.ensure_image(project_root() / "images" / image_name)
    env = envcollect.observe(mrun.spec)
    mrun.record_start(env.to_json(), env.execution_environment_hash)
    states = mrun.cell_states()
    remaining = sum(not s.finished for s in states)
    with (
        attempt.RunServices(run_id, run_dir) as services,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out,
            transient=False,
        ) as progress,
    ):
        bar = progress.add_task("cells", total=len(states), completed=len(states) - remaining)
        summary = execute(
            mrun,
            built.tag,
            lambda plan: attempt.run_attempt(plan, services),
            jobs,
            on_cell_done=lambda cell, n: progress.advance(bar),
        )
    out.print(
        f"{summary.attempts_run} attempts over {summary.cells} cells in {summary.wall_s:.1f} s"
    )
    return run_dir
