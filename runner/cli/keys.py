"""`bench keys init | show | sign`: the runner's signing key. The trust options the checking
commands share (`--trusted-keys`, `--allow-unsigned`) are in options.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.cli.options import KeyDir
from runner.signing import keys as signing

keys_app = typer.Typer(help="The runner's signing key (ed25519).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@keys_app.command("init")
@guarded
def keys_init(directory: KeyDir = None) -> None:
    """Create the signing key pair: private key 0600 in a 0700 directory; print the public key."""
    made = signing.init_keys(directory)
    out.print(f"created {made.path.parent}/{signing.PRIVATE} (owner only) and {made.path}")
    out.print(f"key id {made.keyid}")
    out.print(made.pem.decode().rstrip(), markup=False)
    out.print(
        "to have verifiers trust it: copy the public key into keys/trusted/<name>.pub, with a "
        "<name>.window.toml giving not_before (and not_after when it is retired): keys/README.md"
    )


@keys_app.command("show")
@guarded
def keys_show(directory: KeyDir = None) -> None:
    """Print the public key and key id of the signing key."""
    pub = signing.public_key(directory)
    out.print(f"key id {pub.keyid}")
    out.print(pub.pem.decode().rstrip(), markup=False)


@keys_app.command("sign")
@guarded
def keys_sign(
    run_dir: Annotated[Path, typer.Argument(help="an evaluated run directory", file_okay=False)],
    directory: KeyDir = None,
) -> None:
    """Sign an evaluated run (its files, evidence root and scorecards) once it verifies: with
    this evaluator, or, for a bundle judged by another one, once that evaluator (found in git
    history, as `bench reproduce --evaluator-from-history`) reproduces it."""
    from runner.cli.reading import read_run
    from runner.signing.run import sign_run

    read_run(run_dir)  # the entry of every reading command: nothing hostile is signed or copied
    signed = sign_run(run_dir, directory)
    if signed.reproduced_by is not None:
        out.print(f"reproduced by its own evaluator {signed.reproduced_by}")
    if signed.problem is not None:
        err.print(f"[bold red]not signed[/]: {escape(signed.problem)}")
        raise typer.Exit(EXIT_INCOMPLETE)
    out.print(f"signed {run_dir} with key {signed.keyid[:16]}: {signed.files} files")
