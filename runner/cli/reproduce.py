"""`bench reproduce BUNDLE [--rerun]`: re-derive a published result bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INCOMPLETE, EXIT_REFUSED, app, err, guarded, out
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.environment.hooks import environment_hook
from runner.evaluator.publish.reproduce import reproduce as reproduce_bundle


@app.command()
@guarded
def reproduce(
    bundle: Annotated[Path, typer.Argument(help="a result bundle (a run directory)")],
    rerun: Annotated[
        bool, typer.Option(help="also re-execute its matrix here and compare every cell")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="where a rerun goes")] = Path("runs"),
    jobs: Annotated[int, typer.Option(min=1, max=8)] = 1,
) -> None:
    """Say REPRODUCED only when every published result re-derives byte for byte."""
    if not (bundle / "protocol.json").is_file():
        raise InputError("not a result bundle (no protocol.json)", file=str(bundle))
    problems = reproduce_bundle(bundle, evaluator_digest(), environment_hook)
    if problems:
        err.print(f"[bold red]NOT REPRODUCED[/]: {problems[0]}")
        for p in problems[1:10]:
            err.print(f"  also: {p}")
        raise typer.Exit(EXIT_INCOMPLETE)
    n = sum(1 for p in (bundle / "results").rglob("*") if p.is_file())
    out.print(f"REPRODUCED {bundle}: {n} result files re-derive byte for byte")
    if rerun:
        _rerun(bundle, out_dir, jobs)


def _rerun(bundle: Path, out_root: Path, jobs: int) -> None:
    from runner.cli.run import run_matrix
    from runner.evaluator.core.canonical import parse_json
    from runner.evaluator.environment.conformance import check_environments, load_environment
    from runner.evaluator.evidence.journal import EvidenceStore
    from runner.evaluator.protocol.runfile import read_protocol
    from runner.evaluator.publish.reproduce import projection
    from runner.evaluator.verdict.eligibility import LoadedEvidence, evaluate_run
    from runner.runtime import envcollect
    from runner.runtime.executor import MatrixRun
    from runner.runtime.host import naming

    rp = read_protocol(bundle)
    spec_path = project_root() / "specs" / rp.spec_name
    spec = rp.spec()
    store = EvidenceStore(bundle)
    published = LoadedEvidence.from_store(store)
    here = envcollect.observe(spec)
    then = [load_environment(parse_json(store.get_blob(r.artifact))) for r in published.environment]
    proof = check_environments([*then, here], spec.factors, spec.sources)
    if not proof.conform:
        err.print("[bold red]rerun refused[/]: this machine does not conform to the bundle's:")
        for c in proof.reason_codes:
            err.print(f"  - {c}")
        raise typer.Exit(EXIT_REFUSED)
    mrun = MatrixRun.create(spec_path, out_root, naming.new_run_id(), allow_draft=False)
    if mrun.rp.identities.protocol_hash != rp.identities.protocol_hash:
        raise InputError(
            f"{spec_path} resolves to another protocol than the bundle's", file=str(spec_path)
        )
    run_dir = run_matrix(mrun, jobs)
    digest = evaluator_digest()
    old = evaluate_run(rp, published, digest)
    new = evaluate_run(
        read_protocol(run_dir), LoadedEvidence.from_store(EvidenceStore(run_dir)), digest
    )
    differing = []
    for subject in sorted(old):
        a = projection(old[subject].terminal_records)
        b = projection(new[subject].terminal_records)
        differing += [f"{subject}: {x!r}" for x, y in zip(a, b, strict=True) if x != y]
    if differing:
        err.print(f"[bold red]RERUN DIFFERS[/] ({len(differing)} cells); first: {differing[0]}")
        raise typer.Exit(EXIT_INCOMPLETE)
    out.print(f"RERUN REPRODUCED: every cell's deterministic projection is identical ({run_dir})")
