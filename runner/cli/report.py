"""`bench report RUN_DIR|BUNDLE [--out FILE] [--junit]`: the derived HTML report or JUnit XML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import app, guarded, out
from runner.evaluator.core.errors import EvidenceError
from runner.report import write_junit, write_report


@app.command()
@guarded
def report(
    run_dir: Annotated[
        Path,
        typer.Argument(help="an evaluated run directory or a published bundle", file_okay=False),
    ],
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", help="where to write (default RUN_DIR/results/report.html or junit.xml)"
        ),
    ] = None,
    junit: Annotated[bool, typer.Option("--junit", help="write JUnit XML instead of HTML")] = False,
) -> None:
    """Write a self-contained HTML report (or JUnit XML) derived from a run's evidence and results.

    Derived, not evidence: no hash binds it and `bench verify` does not re-derive it.
    """
    from runner.cli.reading import read_run

    read_run(run_dir)  # refused whole (exit 3) before a byte is rendered or written
    try:
        path = (write_junit if junit else write_report)(run_dir, out_file)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        # the report trusts results/ as `bench evaluate` wrote them; other shapes are refused
        raise EvidenceError(
            f"{run_dir}/results: not as `bench evaluate` writes them ({type(exc).__name__}: "
            f"{exc}); `bench verify` names what differs"
        ) from exc
    out.print(f"{'junit' if junit else 'report'} written to {path}")
