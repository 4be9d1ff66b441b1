"""`bench selftest [--json]`: does fault injection work on this machine? (negative conformance)"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from runner.cli.app import EXIT_INTERNAL, EXIT_OK, app, err, guarded, out
from runner.evaluator.core.errors import InputError


@app.command()
@guarded
def selftest(
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
    image: Annotated[
        str | None, typer.Option(help="sandbox image (default: the tiny busybox test image)")
    ] = None,
    keep: Annotated[bool, typer.Option(help="keep the self-test's run directory")] = False,
    kind: Annotated[
        list[str] | None,
        typer.Option(help="only this fault kind (repeatable; default: every registered kind)"),
    ] = None,
) -> None:
    """Run every fault kind with its real actuator and with a no-op one; judge by the evaluator.

    Exit 0 only when every real actuator is WITNESSED and every no-op one INVALID_INJECTION.
    """
    from runner.runtime.selftest import Row, run_selftest

    def progress(row: Row) -> None:
        if not as_json:
            mark = "ok" if row.ok else "[bold red]UNEXPECTED[/]"
            err.print(f"  {row.kind} / {row.actuator}: {row.verdict} ({row.seconds:.1f} s) {mark}")

    from runner.evaluator.protocol.faultkinds import injected_kinds

    kinds = kind or list(injected_kinds())
    unknown = sorted(set(kinds) - set(injected_kinds()))
    if unknown:
        raise InputError(f"unknown fault kind {unknown}; registered: {list(injected_kinds())}")
    if not as_json:
        err.print(f"running {len(kinds)} fault kinds x {{real, noop}} on this machine ...")
    rows, run_dir = run_selftest(kinds, image=image, keep=keep, on_row=progress)
    ok = all(r.ok for r in rows)
    if as_json:
        body = {
            "ok": ok,
            "run_dir": str(run_dir) if keep else None,
            "rows": [{**r.__dict__, "ok": r.ok} for r in rows],
        }
        out.print_json(json.dumps(body))
    else:
        table = Table(title="bench selftest: fault injection on this machine")
        for col in ("kind", "actuator", "verdict"):
            table.add_column(col, no_wrap=True)
        table.add_column("violated predicates / reasons", overflow="fold")
        table.add_column("expected", no_wrap=True)
        for r in rows:
            style = "green" if r.ok else "bold red"
            why = ", ".join(r.violated or r.reasons) or "-"
            table.add_row(
                r.kind,
                r.actuator,
                f"[{style}]{r.verdict}[/]",
                escape(why),
                "ok" if r.ok else "[bold red]MISMATCH[/]",
            )
        out.print(table)
        if keep:
            out.print(f"evidence kept in {run_dir}")
        verdict = "fault injection works here" if ok else "[bold red]do not trust faults here[/]"
        out.print(verdict)
    raise typer.Exit(EXIT_OK if ok else EXIT_INTERNAL)
