"""`bench reproduce BUNDLE [--evaluator-from-history] [--rerun]`: re-derive a published result
bit for bit, with this checkout's evaluator or, when the bundle names another, with that one
(found in git history by its digest: runner/history.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from runner.cli.app import EXIT_INCOMPLETE, EXIT_REFUSED, app, err, guarded, out
from runner.cli.options import AllowUnsigned, Jobs, TrustedOpt, default_jobs
from runner.evaluator.core.errors import InputError

if TYPE_CHECKING:
    from runner.reproduction import Reproduction


@app.command()
@guarded
def reproduce(
    bundle: Annotated[Path, typer.Argument(help="a result bundle (a run directory)")],
    rerun: Annotated[
        bool, typer.Option(help="also re-execute its matrix here and compare every cell")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="where a rerun goes")] = Path("runs"),
    jobs: Jobs = None,
    from_history: Annotated[
        bool,
        typer.Option(
            "--evaluator-from-history",
            help="when the bundle names another evaluator, run that one: the git commit whose "
            "evaluator inputs hash to the bundle's evaluator_digest, from a temporary export",
        ),
    ] = False,
    trusted_keys: TrustedOpt = None,
    allow_unsigned: AllowUnsigned = False,
) -> None:
    """Say REPRODUCED only when the bundle is signed by a trusted key, every file is the one
    signed, and every published result re-derives byte for byte."""
    from runner.cli.reading import read_run
    from runner.evaluator.core.errors import EvidenceError
    from runner.reproduction import reproduce as reproduce_bundle

    try:
        read_run(bundle)  # layout, sizes, references, protocol: before signatures
    except EvidenceError as exc:  # refused as verify refuses it: exit 3, one line
        err.print(f"[bold red]NOT REPRODUCED[/]: {escape(str(exc))}")
        raise typer.Exit(EXIT_INCOMPLETE) from None
    r = reproduce_bundle(bundle, trusted_keys, allow_unsigned=allow_unsigned,
                         from_history=from_history and not rerun)  # fmt: skip
    if allow_unsigned:
        err.print("signature: not checked (--allow-unsigned): a local run, not a publication")
    elif r.signature is None:
        out.print(
            "signature: every file is the one a trusted key signed (but the two derived "
            "views, which no signature covers: they are re-rendered below)"
        )
    if not r.same_evaluator:
        _other_evaluator(bundle, r, from_history, rerun, allow_unsigned)
        return
    out.print(f"evaluator: the bundle's ({r.theirs}) is this checkout's")
    if r.problems:
        err.print(f"[bold red]NOT REPRODUCED[/]: {escape(r.problems[0])}")
        for p in r.problems[1:10]:
            err.print(f"  also: {escape(p)}")
        raise typer.Exit(EXIT_INCOMPLETE)
    out.print(
        "checked: the bundle's layout (every entry expected, each file's type and size), every "
        "journal chain and record order, every blob address, protocol.json"
        + ("" if allow_unsigned else ", the signatures of the run and of every scorecard")
    )
    views = r.views
    out.print(
        f"REPRODUCED {bundle}: {r.result_files} result files re-derive byte for byte"
        + (f"; {' and '.join(views)} re-render byte for byte" if views else "; no derived view")
    )
    if not rerun:
        return
    from runner.cli.display import cell_progress, log
    from runner.orchestrate import rerun as rerun_bundle

    again = rerun_bundle(
        bundle, out_dir, jobs=jobs or default_jobs(), log=log, progress=cell_progress
    )
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


def _other_evaluator(
    bundle: Path, r: Reproduction, from_history: bool, rerun: bool, allow_unsigned: bool
) -> None:
    theirs, unsigned = r.theirs, r.signature
    err.print(
        f"evaluator: the bundle was made by evaluator {theirs}; this checkout's is {r.ours}. "
        "This evaluator cannot re-derive it byte for byte."
    )
    if not from_history:
        err.print(
            "[bold red]NOT REPRODUCED[/]: made by another evaluator; rerun with "
            "--evaluator-from-history to run that evaluator from this repository's git history"
        )
        if unsigned is not None:
            err.print(f"  also: signature: {unsigned}", markup=False)
        raise typer.Exit(EXIT_INCOMPLETE)
    if rerun:
        raise InputError("--rerun needs the bundle's own evaluator checked out", key="--rerun")
    if r.historic_error is not None:
        raise r.historic_error
    ran = r.historic
    assert ran is not None
    out.print(
        f"evaluator: commit {ran.found.commit[:12]} has evaluator inputs hashing to {theirs}; "
        "running its `bench reproduce` from a temporary export"
    )
    for line in ran.stdout.splitlines():
        out.print(f"  | {line}", markup=False)
    for line in ran.stderr.splitlines():
        err.print(f"  | {line}", markup=False)
    if unsigned is not None:
        err.print(f"[bold red]NOT REPRODUCED[/]: signature: {escape(unsigned)}")
        raise typer.Exit(EXIT_INCOMPLETE)
    if not r.historic_reproduced:
        err.print(
            f"[bold red]NOT REPRODUCED[/] by evaluator {theirs} (commit {ran.found.commit[:12]}, "
            f"exit {ran.returncode})"
        )
        raise typer.Exit(EXIT_INCOMPLETE)
    out.print(
        "checked here: the bundle's layout (every entry expected, each file's type and size), "
        "every blob address, protocol.json"
        + ("; the signatures of the run and of every scorecard" if not allow_unsigned else "")
        + "; not checked: the derived views (rendered from another evaluator's results)"
    )
    out.print(f"REPRODUCED {bundle} with its own evaluator (commit {ran.found.commit[:12]})")
