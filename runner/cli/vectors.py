"""`bench vectors regenerate [--check]`: every known-answer vector family the code writes, identity
and environment (runner/vectors/). Replaces `python vectors/identity/regenerate.py` and
`python -m tests.environment.vectors_gen`."""

from __future__ import annotations

from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out

vectors_app = typer.Typer(help="Known-answer vectors (vectors/).", no_args_is_help=True)
app.add_typer(vectors_app, name="vectors")


@vectors_app.command("regenerate")
@guarded
def regenerate(
    check: Annotated[
        bool, typer.Option("--check", help="write nothing; exit 3 if a vector would change")
    ] = False,
) -> None:
    """Recompute vectors/identity/*.json (a fixed evaluator digest: they move only with the spec
    language, a hashing rule, a witness contract or a task file) and vectors/environment/*.json
    (artifacts and conformance cases under its spec.toml); say why in the commit."""
    from runner.evaluator.core.inputs import project_root
    from runner.vectors import regenerate as regenerate_vectors

    root = project_root()
    changed = regenerate_vectors(root, write=not check)
    for path, differs in changed.items():
        rel = path.relative_to(root)
        if not differs:
            out.print(f"unchanged {rel}")
        elif check:
            err.print(f"[bold red]would change[/] {rel}")
        else:
            out.print(f"wrote {rel}")
    if check and any(changed.values()):
        raise typer.Exit(EXIT_INCOMPLETE)
