"""`bench selftest [--json]`: does fault injection work on this machine? (negative conformance)
`bench selftest --sandbox NAME`: does sandbox backend NAME do what the interface promises?"""

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
    sandbox: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="instead: run sandbox backend NAME's conformance suite (e.g. podman)",
        ),
    ] = None,
    check: Annotated[
        list[str] | None,
        typer.Option(help="with --sandbox: only this conformance check (repeatable)"),
    ] = None,
) -> None:
    """Run every fault kind with its real actuator and with a no-op one; judge by the evaluator.

    Exit 0 only when every real actuator is WITNESSED and every no-op one INVALID_INJECTION.
    With --sandbox NAME, run that backend's conformance checks instead: exit 0 only when all
    pass, 1 naming each failed check.
    """
    if sandbox is not None:
        if kind or image or keep:
            raise InputError(
                "--sandbox runs the backend's conformance suite: no --kind/--image/--keep"
            )
        _sandbox_selftest(sandbox, check, as_json)
    if check:
        raise InputError("--check names a conformance check: it needs --sandbox NAME")
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


def _sandbox_selftest(name: str, only: list[str] | None, as_json: bool) -> None:
    from runner.runtime.sandbox import conformance, registry

    try:
        backend = registry.backend(name)
    except registry.UnknownBackend as exc:
        raise InputError(str(exc), key="--sandbox") from None
    unknown = sorted(set(only or ()) - set(conformance.check_names()))
    if unknown:
        known = ", ".join(conformance.check_names())
        raise InputError(f"unknown conformance check {unknown}; known: {known}", key="--check")

    def progress(r: conformance.CheckResult) -> None:
        if not as_json:
            mark = "ok" if r.ok else f"[bold red]FAILED[/] {escape(r.error or '')}"
            err.print(f"  {r.name} ({r.seconds:.1f} s) {mark}")

    if not as_json:
        err.print(f"checking sandbox backend {name} against its conformance suite ...")
    results = conformance.run_suite(backend, only=only, on_result=progress)
    failed = [r for r in results if not r.ok]
    if as_json:
        body = {"backend": name, "ok": not failed, "checks": [r.__dict__ for r in results]}
        out.print_json(json.dumps(body))
    elif failed:
        out.print(f"[bold red]sandbox backend {name} failed {len(failed)} check(s):[/]")
        for r in failed:
            out.print(f"  {r.name}: {escape(r.error or '')}")
    else:
        out.print(f"sandbox backend {name} passed all {len(results)} checks")
    raise typer.Exit(EXIT_INTERNAL if failed else EXIT_OK)
