"""`bench canonicalize | digest | plan | freeze | amend | schema`: specs, identities, lifecycle."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from runner.cli.app import _say, app, guarded, out
from runner.evaluator.core.canonical import sha256_digest
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.schemas import write_schemas

SpecArg = Annotated[Path, typer.Argument(help="a spec file (TOML)")]


@app.command()
@guarded
def canonicalize(file: Annotated[Path, typer.Argument(help="a JSON file")]) -> None:
    """Print the RFC 8785 canonical bytes of a JSON file."""
    from runner.jsonfile import canonical_file

    sys.stdout.buffer.write(canonical_file(file))
    sys.stdout.buffer.flush()


@app.command("digest")
@guarded
def digest_cmd(file: Annotated[Path, typer.Argument(help="a JSON file")]) -> None:
    """Print the sha256 digest of a JSON file's canonical bytes."""
    from runner.jsonfile import canonical_file

    out.print(sha256_digest(canonical_file(file)))


STATUS_TEXT = {
    freezing.ProtocolStatus.DRAFT: "draft",
    freezing.ProtocolStatus.FROZEN: "frozen",
    freezing.ProtocolStatus.AMENDMENT_REQUIRED: "frozen protocol changed: amendment required",
}


@app.command()
@guarded
def plan(spec: SpecArg, json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Resolve a spec: cells per stratum, every identity, and the draft/frozen status."""
    from runner.cli.options import anchor
    from runner.planning import plan as make_plan

    p = make_plan(spec, anchor())  # the freeze log against its signed head
    for warning in p.warnings:  # on stderr: --json's stdout stays one document
        _say("warning", warning)
    if json_out:
        sys.stdout.write(json.dumps(p.as_json(), indent=2, sort_keys=True) + "\n")
        return
    s, m, ids = p.spec, p.matrix, p.identities
    out.print(f"[bold]{s.protocol.id}[/] {s.protocol.version}: {STATUS_TEXT[p.status]}")
    table = Table(title=f"{m.cell_count} cells ({len(m.slots)} slots x {len(m.subjects)} subjects)")
    table.add_column("stratum")
    table.add_column("cells", justify="right")
    for k, v in p.strata.items():
        table.add_row(k, str(v))
    out.print(table)
    for name, value in ids.model_dump(mode="json").items():
        if isinstance(value, dict):
            for sub, h in sorted(value.items()):
                out.print(f"  subject_config_hash[{sub}] {h}", markup=False)
        else:
            out.print(f"  {name:<24} {value}")
    _print_power(p.power)


def _print_power(power: dict[str, Any]) -> None:
    if not power["comparisons"]:
        out.print("power: one subject, no comparison planned")
        return
    table = Table(
        title=f"power of each planned paired comparison ({power['subject_pairs']} subject "
        f"pair(s); alpha {power['alpha']}, minimum detectable effect "
        f"{power['minimum_detectable_effect']}, replicates {power['replicates']})"
    )
    for col in ("stratum", "tasks", "pairs", "smallest p", "power"):
        if col == "stratum":
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, justify="right")
    for r in power["comparisons"]:
        table.add_row(
            r["stratum"], str(r["tasks"]), str(r["pairs"]),
            f"{r['smallest_attainable_p']:.3g}", f"{r['power']:.0%}",
        )  # fmt: skip
    out.print(table)
    if power["below_80_percent"]:
        out.print(
            f"[yellow]warning:[/] power below 80 % in {len(power['below_80_percent'])} planned "
            "comparison(s): "
            + ", ".join(power["below_80_percent"])
            + " (more tasks, replicates or a larger minimum_detectable_effect)",
            markup=True,
        )


@app.command()
@guarded
def freeze(
    spec: SpecArg, reason: Annotated[str, typer.Option(help="why")] = "initial freeze"
) -> None:
    """Write a freeze record binding the spec's protocol_hash (no-op if already frozen)."""
    from runner.cli.options import anchor, sealer
    from runner.planning import freeze as freeze_spec

    rec = freeze_spec(spec, reason, anchor, sealer)
    out.print(f"frozen {rec.protocol_hash} in {freezing.log_path(spec)}")


@app.command()
@guarded
def amend(
    spec: SpecArg, reason: Annotated[str, typer.Option(help="why the protocol changed")]
) -> None:
    """Record an amendment: the new protocol_hash with its parent and the reason."""
    from runner.cli.options import anchor, sealer
    from runner.planning import amend as amend_spec

    rec = amend_spec(spec, reason, anchor, sealer)
    out.print(f"amended {rec.parent_protocol_hash} -> {rec.protocol_hash}")


@app.command()
@guarded
def schema(
    directory: Annotated[
        Path | None,
        typer.Option(
            help="where to write (default: the checkout; runtime schemas in their subfolders)"
        ),
    ] = None,
    check: Annotated[bool, typer.Option(help="only report drift, exit 1 on any")] = False,
) -> None:
    """Regenerate the JSON Schemas from the typed models: the evaluator's in schemas/, the
    runtime's (subject configs, cassettes) beside their models (runner/runtime/*/schemas/)."""
    from pydantic import BaseModel

    from runner.runtime.schemas import runtime_schema_sets

    base = directory or project_root()
    sets: list[tuple[Path, Mapping[str, type[BaseModel]] | None]]
    sets = [(directory or base / "schemas", None)]
    sets += [(base / folder, models) for folder, models in runtime_schema_sets().items()]
    drifted = False
    for folder, models in sets:
        for name in write_schemas(folder, check=check, models=models):
            drifted = True
            out.print(f"{'drift' if check else 'wrote'} {folder / name}")
    if check and drifted:
        raise typer.Exit(1)
