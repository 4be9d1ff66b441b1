"""`bench run SPEC`: resolve, check the freeze, run every cell, evaluate, publish or report.

`--only task=ID,fault=ID` runs a subset of the cells, always as a draft (runtime/cellselect.py);
a draft run prints its per-cell diagnostics ("draft: not a result"; evaluator/publish/diagnostics).
`--cluster tcp://HOST:PORT` runs the attempts on Dask workers (`bench worker`), showing cells per
worker and attempts in flight; `--shard i/N` runs one hash shard's cells and writes evidence only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.cli.display import (
    ClusterView,
    cell_progress,
    log,
    print_draft_diagnostics,
    summary_table,
)
from runner.cli.options import Jobs, SandboxOpt, default_jobs


@app.command()
@guarded
def run(
    spec: Annotated[Path, typer.Argument(help="a spec file, e.g. specs/swe-lite.toml")],
    out_dir: Annotated[Path, typer.Option("--out", help="where run directories go")] = Path("runs"),
    jobs: Jobs = None,
    sandbox: SandboxOpt = "podman",
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
    from runner.orchestrate import Cluster, RunOptions, Shard, run_spec
    from runner.scale.shard import parse_shard
    from runner.scale.worker_host import check_address, parse_resources

    where: Cluster | None = None
    view = None
    if cluster is not None:
        view = ClusterView()
        where = Cluster(check_address(cluster, "--cluster"), parse_resources(resources), view)
    elif resources is not None:
        raise InputError("--resources is what a cluster's workers must offer: give --cluster")
    if cluster is not None and jobs is not None:
        raise InputError("--jobs is for a local run; a cluster runs as many as it has workers")
    if cluster is None and jobs is None:
        jobs = default_jobs()
        out.print(f"jobs: {jobs} (what this machine carries; --jobs N to choose)")
    part = Shard(*parse_shard(shard)) if shard is not None else None
    options = RunOptions(
        out_root=out_dir,
        jobs=jobs or 1,
        resume=resume,
        draft=draft,
        cluster=where,
        shard=part,
        keep_subject_dirs=keep_subject_dirs,
        only=tuple(only or ()),
        sandbox_backend=sandbox,
    )
    progress = view.progress if view is not None else cell_progress
    outcome = run_spec(spec, options, log=log, progress=progress)
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
