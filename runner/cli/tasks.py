"""`bench tasks check DIR`: a task set's bad input (exit 2, `taskcheck`), then every swe-lite task
fails without its fix and passes with it;
`bench tasks cassettes [--scripted]`: the swe-lite policy (or legacy scripted) cassettes and
their folders' digests."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.evaluator.core.errors import InputError

tasks_app = typer.Typer(help="Benchmark task sets (specs/swe-lite/).")
app.add_typer(tasks_app, name="tasks")


@tasks_app.command("check")
@guarded
def check(
    tasks_root: Annotated[
        Path, typer.Argument(help="a task set folder with sources.toml, e.g. specs/swe-lite")
    ] = Path("specs/swe-lite"),
    python: Annotated[
        str, typer.Option(help="interpreter with pytest (on the host)")
    ] = sys.executable,
    sandbox: Annotated[
        str | None,
        typer.Option(
            "--sandbox",
            help="run the fail/pass checks in a sandbox of the swe-lite image on this backend "
            "(a registered name, e.g. podman) instead of on the host; needs root",
        ),
    ] = None,
) -> None:
    """Check every task: it is well-formed, fails without its fix and passes with it.

    First bad input, exit 2 naming each task and its problem: a source whose sdist does not
    match its sha256, a patch that does not apply to the pristine source, a test id pytest does
    not collect, a problem.md holding a line of gold.patch, a duplicate task id, a bucket the
    bucket rule does not give, a missing or malformed `\\[provenance]` table. Then against pristine
    sources: FAIL_TO_PASS fails without the gold patch; with it, every FAIL_TO_PASS and
    PASS_TO_PASS test passes, on the host or, with `--sandbox NAME`, each task in its own
    sandbox of the swe-lite image (its Python and pytest, the ones that grade). Exit 3 when a
    task does not.
    """
    from runner.benchmarks.swe_lite.grade import TaskCheck, check_tasks
    from runner.benchmarks.swe_lite.taskcheck import input_problems
    from runner.cli.options import check_sandbox

    if sandbox is not None:
        check_sandbox(sandbox)  # an unknown name: exit 2 before any work
    if not (tasks_root / "sources.toml").is_file():
        raise InputError("not a task set (no sources.toml)", file=str(tasks_root))
    # the tests run inside each task's scratch copy: a relative interpreter path would miss
    python = os.path.abspath(python) if os.sep in python else shutil.which(python) or python
    problems = input_problems(tasks_root, python)
    if problems:
        for prob in problems:
            err.print(f"FAIL {prob.render()}", markup=False)
        names = sorted({p.task for p in problems})
        raise InputError(
            f"{len(problems)} input problem(s) in {len(names)} task(s): {', '.join(names)}",
            file=str(tasks_root),
        )

    def show(r: TaskCheck) -> None:
        out.print(f"{'ok  ' if r.ok else 'FAIL'} {r.task_id}", markup=False)
        for prob in r.problems:
            out.print(f"     - {prob}", markup=False)

    if sandbox is None:
        results = check_tasks(tasks_root, python)
        for r in results:
            show(r)
    else:
        from runner.benchmarks.swe_lite.sandboxcheck import check_tasks_in_sandbox

        results = check_tasks_in_sandbox(tasks_root, sandbox, on_task=show)
    if not all(r.ok for r in results):
        err.print(f"{sum(not r.ok for r in results)} of {len(results)} tasks fail the check")
        raise typer.Exit(EXIT_INCOMPLETE)


@tasks_app.command("cassettes")
@guarded
def cassettes(
    spec: Annotated[
        Path, typer.Option(help="the spec whose task sets are written (e.g. specs/swe-lite.toml)")
    ] = Path("specs/swe-lite.toml"),
    into: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="folder: <subject kind>/<policy>/<task id>.json under it (default "
            "specs/swe-lite-agents/policies); with --scripted, cassettes/ and control-cassettes/ "
            "under it (default specs/swe-lite-agents)",
        ),
    ] = None,
    scripted: Annotated[
        bool,
        typer.Option(
            "--scripted",
            help="write the legacy scripted cassettes (mini-swe-agent's and the control's, "
            "served by swe-lite-agents 1.0.0 and the subject tests) instead of the policy ones",
        ),
    ] = False,
) -> None:
    """Write the swe-lite policy cassettes: per subject kind (mini-swe-agent, control,
    mcp-responses), per model policy (careful, naive), per task; or, with --scripted, the legacy
    scripted ones; then each folder's digest (a spec's `model.digest`)."""
    from runner.runtime.subjects.tree import tree_digest

    if not spec.is_file():
        raise InputError("no such spec", file=str(spec))
    if scripted:
        from runner.benchmarks.swe_lite.scripted_cassettes import write_scripted_cassettes

        written = write_scripted_cassettes(spec, into or Path("specs/swe-lite-agents"))
    else:
        from runner.benchmarks.swe_lite.cassettes import write_policy_cassettes

        written = write_policy_cassettes(spec, into or Path("specs/swe-lite-agents/policies"))
    for folder in sorted({p.parent for p in written}):
        out.print(f"{tree_digest(folder)}  {folder}")
