"""`bench keys init | show | sign`: the runner's signing key, and the trust options the checking
commands share (`--trusted-keys`, `--allow-unsigned`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from runner.cli.app import EXIT_INCOMPLETE, app, err, guarded, out
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.publish.registry import Registry
from runner.evaluator.trust.head import check_head
from runner.evaluator.trust.keys import TRUSTED_ENV, trusted_keys
from runner.trust import keys as signing

keys_app = typer.Typer(help="The runner's signing key (ed25519).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

KeyDir = Annotated[
    Path | None,
    typer.Option("--dir", help=f"key directory (default: ${signing.KEY_DIR_ENV} or "
                 f"{signing.DEFAULT_KEY_DIR})", file_okay=False),
]  # fmt: skip
TrustedOpt = Annotated[
    Path | None,
    typer.Option("--trusted-keys", help=f"directory of trusted *.pub keys (default: "
                 f"${TRUSTED_ENV} or keys/trusted/)", file_okay=False),
]  # fmt: skip
AllowUnsigned = Annotated[
    bool,
    typer.Option(
        "--allow-unsigned",
        help="accept an unsigned local run (its results are still re-derived from its evidence); "
        "never for publication",
    ),
]


@keys_app.command("init")
@guarded
def keys_init(directory: KeyDir = None) -> None:
    """Create the signing key pair: private key 0600 in a 0700 directory; print the public key."""
    made = signing.init_keys(directory)
    out.print(f"created {made.path.parent}/{signing.PRIVATE} (owner only) and {made.path}")
    out.print(f"key id {made.keyid}")
    out.print(made.pem.decode().rstrip(), markup=False)
    out.print("to have verifiers trust it: copy the public key into keys/trusted/<name>.pub")


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
    from runner.evaluator.publish.results import judging_evaluator
    from runner.trust.sign import key_outside, sign_results

    read_run(run_dir)  # the entry of every reading command: nothing hostile is signed or copied
    key_outside(run_dir, signing.key_dir(directory))
    signer = signing.load_signer(directory)
    theirs = judging_evaluator(run_dir)
    problem = _verified(run_dir) if theirs == evaluator_digest() else _reproduced(run_dir, theirs)
    if problem is not None:
        err.print(f"[bold red]not signed[/]: {escape(problem)}")
        raise typer.Exit(EXIT_INCOMPLETE)
    written = sign_results(run_dir, signer)
    out.print(f"signed {run_dir} with key {signer.public_key.keyid[:16]}: {len(written)} files")


def _verified(run_dir: Path) -> str | None:
    from runner.evaluator.environment.hooks import environment_hook
    from runner.evaluator.publish.results import verify

    problems = verify(run_dir, evaluator_digest(), environment_hook)
    return f"the run does not verify: {problems[0]}" if problems else None


def _reproduced(run_dir: Path, theirs: str) -> str | None:
    import tempfile

    from runner.cli.reproduce import unsigned_copy
    from runner.history import repository, run_historic_bench

    with tempfile.TemporaryDirectory(prefix="afb-sign-") as tmp:
        copy = unsigned_copy(run_dir.resolve(), Path(tmp))
        ran = run_historic_bench(
            repository(project_root()), theirs, ["reproduce", str(copy)],
            if_known=["--allow-unsigned"],  # an unsigned copy: the run is about to be signed
        )  # fmt: skip
    if ran.returncode == 0 and "REPRODUCED" in ran.stdout:
        out.print(f"reproduced by its own evaluator {theirs} (commit {ran.found.commit[:12]})")
        return None
    last = (ran.stderr.strip().splitlines() or ran.stdout.strip().splitlines() or ["?"])[-1]
    return f"its own evaluator {theirs} does not reproduce it (exit {ran.returncode}): {last}"


def registry_path(given: Path | None) -> Path:
    """The registry file: the one given, else the repository's (not the working directory's).
    A missing registry is an error, never an empty one."""
    path = given if given is not None else project_root() / "registry" / "registry.jsonl"
    if not path.is_file():
        raise InputError(
            "no registry here (a missing registry is an error, not an empty one; "
            "`bench registry init --registry PATH` creates one)",
            file=str(path),
        )
    return path


def open_registry(
    given: Path | None, trusted_dir: Path | None, *, write: bool = False,
    key_dir: Path | None = None,
) -> Registry:  # fmt: skip
    """The registry, anchored: every read checks its signed head against the trusted keys; a
    writer re-signs the head with the signing key after each append."""
    path = registry_path(given)
    keys = trusted_keys(trusted_dir)
    sealer = None
    if write:
        from runner.trust.sign import sign_head

        signer = signing.load_signer(key_dir)

        def sealer(p: Path) -> object:
            return sign_head(p, signer)

    return Registry(path, anchor=lambda p: check_head(p, keys), sealer=sealer)
