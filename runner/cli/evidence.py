"""`bench evaluate | verify | compare | registry`: from evidence to decisions and back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from runner.cli.app import EXIT_INCOMPLETE, EXIT_REFUSED, app, err, guarded, out
from runner.cli.display import summary_table
from runner.cli.options import (
    AllowUnsigned,
    KeyDir,
    RegOpt,
    RunDir,
    TrustedOpt,
    need_run_dir,
    open_registry,
)


@app.command()
@guarded
def evaluate(run_dir: RunDir) -> None:
    """Re-derive proofs and results from a run's evidence alone; write RUN_DIR/results/."""
    need_run_dir(run_dir)
    from runner.cli.reading import read_run
    from runner.orchestrate import evaluate_and_write

    read_run(run_dir)  # the one entry of every reading command (exit 3 naming the first problem)

    results = evaluate_and_write(run_dir, out.print)
    out.print(summary_table(results))
    from runner.cli.display import print_draft_diagnostics

    print_draft_diagnostics(run_dir)  # a draft run's per-cell diagnostics ("not a result")
    out.print(f"results in {run_dir / 'results'}")
    if any(r.scorecard is None for r in results.values()):
        err.print("incomplete evidence: no scorecard for the subjects marked above")
        raise typer.Exit(EXIT_INCOMPLETE)


@app.command()
@guarded
def verify(
    run_dir: RunDir, trusted_keys: TrustedOpt = None, allow_unsigned: AllowUnsigned = False
) -> None:
    """Recompute every hash, journal chain, blob address and result, and check the run's
    signatures against the trusted keys; name the first mismatch."""
    need_run_dir(run_dir)
    from runner.cli.reading import read_run
    from runner.evaluator.core.errors import EvidenceError
    from runner.verification import verify as verify_run

    try:
        read_run(run_dir)  # the one entry of every reading command, before any signature
    except EvidenceError as exc:  # nothing past a refused layout is read, signatures neither
        err.print(f"[bold red]verify failed:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_INCOMPLETE) from None
    v = verify_run(run_dir, trusted_keys, allow_unsigned=allow_unsigned)
    if not v.signature_checked:
        err.print("signature: not checked (--allow-unsigned): a local run, not a publication")
    elif v.never_signed:
        say_unsigned(run_dir)
        raise typer.Exit(EXIT_INCOMPLETE)
    if v.problems:
        err.print(f"[bold red]verify failed:[/] {v.problems[0]}")
        for p in v.problems[1:10]:
            err.print(f"  also: {p}")
        raise typer.Exit(EXIT_INCOMPLETE)
    signed = "" if allow_unsigned else ", signed by a trusted key"
    out.print(
        f"verified {run_dir}: journals, blobs, protocol and results all re-derive, "
        f"report.html and junit.xml (where present) re-render byte for byte{signed}"
    )


def say_unsigned(run_dir: Path) -> None:
    out.print(
        f"verified {run_dir}: journals, blobs, protocol and results all re-derive from its evidence"
    )
    err.print(
        "[bold red]not signed[/]: the run has no signatures/run.dsse.json (no signing key was "
        "configured when it was evaluated), so nothing vouches who made it.\n"
        f"  to sign it: `bench keys sign {run_dir}` (after `bench keys init`, or with the "
        "publisher's key in $AFB_KEY_DIR); verifiers trust keys listed in keys/trusted/\n"
        f"  or accept it unsigned: `bench verify --allow-unsigned {run_dir}` checks everything "
        "above but the signature (a local run, never a publication; reproduce and compare take "
        "the same flag, registry add never does)"
    )


@app.command()
@guarded
def compare(
    results: Annotated[list[Path], typer.Argument(help="RUN/results/<subject>/scorecard.json")],
    out_dir: Annotated[Path, typer.Option("--out", help="where to write")] = Path("comparison"),
    registry: Annotated[
        Path | None, typer.Option(help="refuse retired results (default: the repository's)")
    ] = None,
    trusted_keys: TrustedOpt = None,
    allow_unsigned: AllowUnsigned = False,
) -> None:
    """Compare publishable scorecards, each inside its signed bundle and re-derived from its
    evidence (gated); refuse with reasons and write nothing otherwise."""
    from runner.cli.reading import read_card_bundles
    from runner.comparison import compare as compare_results

    read_card_bundles(results)  # each bundle's layout and sizes first (exit 3 naming it)
    reg = open_registry(registry, trusted_keys)  # its signed head checked
    comparison, reasons = compare_results(
        results, out_dir, reg, trusted_keys, allow_unsigned=allow_unsigned
    )
    if comparison is None:
        err.print("[bold red]comparison refused[/] (no comparison artifact written):")
        for r in reasons:
            err.print(f"  - {r}", markup=False)
        raise typer.Exit(EXIT_REFUSED)
    out.print(f"comparison {comparison.comparison_hash} written to {out_dir}")
    for pc in comparison.paired or []:  # the headline tests; details in comparison.md
        for t in (t for t in pc.tests if t.stratum == "all"):
            said = {"first_higher": f"{pc.first} higher", "second_higher": f"{pc.second} higher"}
            out.print(
                f"  {pc.first} vs {pc.second}, {t.measure}: difference {t.difference}, "
                f"task sign-flip p = {t.sign_flip.p_value} ({t.tasks} tasks): "
                f"{said.get(t.decision, 'no difference shown')} at alpha {pc.alpha}",
                markup=False,
            )
    if comparison.paired is None:
        out.print("  no paired tests: a scorecard's cell rows are missing or predate them")


registry_app = typer.Typer(help="The append-only result registry.", no_args_is_help=True)
app.add_typer(registry_app, name="registry")


@registry_app.command("list")
@guarded
def registry_list(registry: RegOpt = None, trusted_keys: TrustedOpt = None) -> None:
    """Every entry, oldest first (after checking the registry against its signed head)."""
    t = Table()
    for col in ("state", "scorecard", "subject", "protocol", "note"):
        t.add_column(col)
    for e in open_registry(registry, trusted_keys).entries():
        note = e.adjudication or (f"derived from {e.derived_from}" if e.derived_from else "")
        t.add_row(e.type, e.scorecard_hash, e.subject_id, e.protocol_hash, note)
    out.print(t)


@registry_app.command("init")
@guarded
def registry_init(
    registry: Annotated[Path, typer.Option("--registry", help="the new registry file")],
    key_dir: KeyDir = None,
) -> None:
    """Create an empty registry and sign its head (an existing file is never touched)."""
    from runner.signing.sign import init_registry

    head = init_registry(registry, key_dir)
    out.print(f"created {registry} (empty) and its signed head {head}")


@registry_app.command("seal")
@guarded
def registry_seal(
    registry: RegOpt = None, trusted_keys: TrustedOpt = None, key_dir: KeyDir = None
) -> None:
    """Sign the head of a registry that has none yet (after checking its chain)."""
    reg = open_registry(registry, trusted_keys, write=True, key_dir=key_dir)
    reg.seal()
    out.print(f"signed the head of {reg.path} ({len(reg.entries())} entries)")


@registry_app.command("add")
@guarded
def registry_add(
    scorecard: Annotated[Path, typer.Argument(help="RUN/results/<subject>/scorecard.json")],
    registry: RegOpt = None,
    derived_from: Annotated[str | None, typer.Option(help="scorecard hash")] = None,
    trusted_keys: TrustedOpt = None,
    key_dir: KeyDir = None,
) -> None:
    """Register a publishable scorecard: only inside its bundle, signed by a trusted key and
    re-derived from the bundle's evidence (incomplete evidence is refused)."""
    from runner.cli.reading import read_card_bundles
    from runner.verification import scorecard_check

    read_card_bundles([scorecard])  # the bundle's layout and sizes first (exit 3 naming it)
    reg = open_registry(registry, trusted_keys, write=True, key_dir=key_dir)
    e = reg.add(scorecard, derived_from, scorecard_check(trusted_keys))
    out.print(f"published {e.scorecard_hash}")


@registry_app.command("supersede")
@guarded
def registry_supersede(
    target: str,
    adjudication: Annotated[str, typer.Option(help="why")],
    replacement_protocol: Annotated[str, typer.Option(help="sha256:...")],
    replacement: Annotated[str | None, typer.Option(help="replacement scorecard hash")] = None,
    registry: RegOpt = None,
    trusted_keys: TrustedOpt = None,
    key_dir: KeyDir = None,
) -> None:
    """Mark a scorecard superseded, with the adjudication and the replacement protocol."""
    e = open_registry(registry, trusted_keys, write=True, key_dir=key_dir).retire(
        "superseded", target, adjudication, replacement_protocol, replacement
    )
    out.print(f"superseded {e.scorecard_hash}")


@registry_app.command("withdraw")
@guarded
def registry_withdraw(
    target: str,
    adjudication: Annotated[str, typer.Option(help="why")],
    registry: RegOpt = None,
    trusted_keys: TrustedOpt = None,
    key_dir: KeyDir = None,
) -> None:
    """Mark a scorecard withdrawn, with the adjudication."""
    e = open_registry(registry, trusted_keys, write=True, key_dir=key_dir).retire(
        "withdrawn", target, adjudication
    )
    out.print(f"withdrawn {e.scorecard_hash}")
