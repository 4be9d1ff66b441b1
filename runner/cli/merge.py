"""`bench merge`: shard run directories into one run directory (runner/scale/merge.py).

Refusals keep the contract: an input mistake (different protocols, overlapping shards, an
existing output) exits 2, damaged evidence in a shard (a broken chain, a missing blob) exits 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.evaluator.core.errors import EvidenceError


@app.command()
@guarded
def merge(
    shards: Annotated[
        list[Path], typer.Argument(help="shard run directories (bench run --shard i/N)")
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", help="the merged run directory to create (must not exist)")
    ],
) -> None:
    """Check every shard (one protocol, disjoint cells, intact chains and blobs) and write one
    run directory that `bench evaluate` and `bench verify` take like a single-host run."""
    from runner.scale.merge import merge as do_merge

    try:
        # merge runs the same entry per shard (layout.check, then bounded reads), naming the
        # shard and its own remedies (runner/scale/merge.py)
        summary = do_merge(shards, out_dir)
    except EvidenceError as exc:
        err.print(f"[bold red]evidence error:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_INCOMPLETE) from None
    out.print(
        f"merged {summary.shards} shards into {escape(str(summary.out))} (run {summary.run_id}): "
        f"{summary.attempts} attempts, {summary.cells_with_evidence} of "
        f"{summary.cells_in_protocol} cells with evidence, {summary.blobs} blobs"
    )
    for path, run_id in zip(shards, summary.shard_run_ids, strict=True):
        out.print(f"  shard {escape(str(path))}: run {run_id}")
    if summary.cells_with_evidence < summary.cells_in_protocol:
        out.print(
            f"{summary.cells_in_protocol - summary.cells_with_evidence} cells have no evidence "
            "yet: the merge evaluates as incomplete (a missing shard?)"
        )
    out.print(f"next: bench evaluate {escape(str(summary.out))}")
