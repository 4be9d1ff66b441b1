"""`bench sweep`: remove leftovers of crashed runs (netns, veths, nft tables, containers, procs)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from runner.cli.app import EXIT_INTERNAL, app, guarded, out
from runner.evaluator.core.errors import InputError


@app.command()
@guarded
def sweep(
    run: Annotated[
        str | None, typer.Option("--run", help="only this run id (default: every crashed run)")
    ] = None,
    include_live: Annotated[
        bool, typer.Option("--include-live", help="also remove runs whose lock is still held")
    ] = False,
    subject_envs: Annotated[
        bool,
        typer.Option(
            "--subject-envs",
            help="also remove built subject environments whose project no longer hashes to "
            "the digest they were built from (/var/lib/afb/subject-envs)",
        ),
    ] = False,
) -> None:
    """Remove only resources whose names (or process markers) parse as ours; print each one."""
    from runner.runtime.host import naming
    from runner.runtime.sweep import sweep as do_sweep

    if run is not None:
        naming.check_run_id(run)
        if subject_envs:
            raise InputError("--subject-envs sweeps every run's environments: drop --run")
    report = do_sweep(run, include_live=include_live, subject_envs=subject_envs)
    sections = (
        ("process", report.processes),
        ("container", report.containers),
        ("nft table", report.nft_tables),
        ("veth", report.veths),
        ("namespace", report.netns),
        ("subject environment", report.subject_envs),
        ("state directory", report.state_dirs),
        ("lock file", report.locks),
    )
    removed = 0
    for what, items in sections:
        for item in items:
            out.print(f"removed {what}: {escape(item)}")
            removed += 1
    for rid in report.skipped_live_runs:
        out.print(f"skipped live run {rid} (use --include-live to remove it)")
    for e in report.errors:
        out.print(f"[bold red]error:[/] {escape(e)}")
    if not report.removed_anything:
        out.print("nothing to remove")
    else:
        out.print(f"removed {removed} leftover(s) of crashed runs")
    if report.errors:
        raise typer.Exit(EXIT_INTERNAL)
