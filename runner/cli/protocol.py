"""`bench canonicalize | digest | plan | freeze | amend | schema`: specs, identities, lifecycle."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from runner.cli.app import _say, app, guarded, out
from runner.evaluator.core.bounded import JSON_INPUT_CAP, read_bounded
from runner.evaluator.core.canonical import (
    CanonicalError,
    canonical_bytes,
    parse_json,
    sha256_digest,
)
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.matrix import ResolvedMatrix, resolve
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.stats import DEFAULT_ALPHA, DEFAULT_MDE, planned_power
from runner.evaluator.schemas import write_schemas

SpecArg = Annotated[Path, typer.Argument(help="a spec file (TOML)")]


def _read_json(path: Path) -> object:
    data = read_bounded(path, JSON_INPUT_CAP)  # a regular file, size-capped, never blocks
    try:
        return parse_json(data)
    except ValueError as exc:  # includes invalid UTF-8 and nesting deeper than the limit
        raise InputError(f"not valid JSON: {exc}", file=str(path)) from exc


def _canonical_file(path: Path) -> bytes:
    value = _read_json(path)
    try:
        return canonical_bytes(value)
    except CanonicalError as exc:
        raise InputError(f"cannot canonicalize: {exc}", file=str(path)) from exc


@app.command()
@guarded
def canonicalize(file: Annotated[Path, typer.Argument(help="a JSON file")]) -> None:
    """Print the RFC 8785 canonical bytes of a JSON file."""
    sys.stdout.buffer.write(_canonical_file(file))
    sys.stdout.buffer.flush()


@app.command("digest")
@guarded
def digest_cmd(file: Annotated[Path, typer.Argument(help="a JSON file")]) -> None:
    """Print the sha256 digest of a JSON file's canonical bytes."""
    out.print(sha256_digest(_canonical_file(file)))


STATUS_TEXT = {
    freezing.ProtocolStatus.DRAFT: "draft",
    freezing.ProtocolStatus.FROZEN: "frozen",
    freezing.ProtocolStatus.AMENDMENT_REQUIRED: "frozen protocol changed: amendment required",
}


@app.command()
@guarded
def plan(spec: SpecArg, json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Resolve a spec: cells per stratum, every identity, and the draft/frozen status."""
    s = load_spec(spec)
    _warn_subject_configs(s, spec)
    m = resolve(s)
    ids = compute(s, spec, m)
    from runner.cli.options import anchor

    state, _ = freezing.status(spec, ids, anchor())  # the log against its signed head
    strata = Counter(slot.stratum for slot in m.slots)
    power = planned_powers(s, m)
    if json_out:
        doc = {
            "protocol_hash": ids.protocol_hash,
            "matrix_hash": ids.matrix_hash,
            "policy_hash": ids.policy_hash,
            "evaluator_digest": ids.evaluator_digest,
            "cells": m.cell_count,
            "status": state.value,
            "identities": ids.model_dump(mode="json"),
            "strata": {k: v * len(m.subjects) for k, v in sorted(strata.items())},
            "subjects": dict(sorted(m.subjects.items())),
            "power": power,
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    out.print(f"[bold]{s.protocol.id}[/] {s.protocol.version}: {STATUS_TEXT[state]}")
    table = Table(title=f"{m.cell_count} cells ({len(m.slots)} slots x {len(m.subjects)} subjects)")
    table.add_column("stratum")
    table.add_column("cells", justify="right")
    for k, v in sorted(strata.items()):
        table.add_row(k, str(v * len(m.subjects)))
    out.print(table)
    for name, value in ids.model_dump(mode="json").items():
        if isinstance(value, dict):
            for sub, h in sorted(value.items()):
                out.print(f"  subject_config_hash[{sub}] {h}", markup=False)
        else:
            out.print(f"  {name:<24} {value}")
    _print_power(power)


def _warn_subject_configs(s: Spec, spec: Path) -> None:
    """Each subject's config against its adapter's grammar (runtime; nothing built), said as a
    warning: the evaluator plans any declared config (it hashes it as written), `bench run`
    refuses a bad one (exit 2) before any cell runs."""
    from runner.runtime.subjects.registry import check_subject_configs

    try:
        check_subject_configs(s, spec)
    except InputError as exc:
        _say("warning", f"{exc.render()} (`bench run` refuses it)")


def planned_powers(s: Spec, m: ResolvedMatrix) -> dict[str, Any]:
    """The preregistered power of every planned paired comparison (issue 25): each pair of
    subjects, overall and per stratum, from its tasks and pairs (slots, replicates included),
    at [comparison] alpha and minimum_detectable_effect (publish/stats.planned_power)."""
    alpha = s.comparison.alpha or DEFAULT_ALPHA
    mde = s.comparison.minimum_detectable_effect or DEFAULT_MDE
    groups: dict[str, list[str]] = {"all": []}
    for slot in m.slots:
        groups["all"].append(slot.task_id)
        groups.setdefault(slot.stratum, []).append(slot.task_id)
    n = len(m.subjects)
    rows = []
    for stratum, tasks in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0])):
        p = planned_power(len(set(tasks)), len(tasks), alpha, mde)
        rows.append({"stratum": stratum, **p.model_dump(mode="json")})
    return {
        "alpha": alpha,
        "minimum_detectable_effect": mde,
        "replicates": s.matrix.replicates or 1,
        "subject_pairs": n * (n - 1) // 2,
        "comparisons": rows if n > 1 else [],
        "below_80_percent": sorted(r["stratum"] for r in rows if r["power"] < 0.8) if n > 1 else [],
    }


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
    s = load_spec(spec)
    ids = compute(s, spec)
    from runner.cli.options import anchor, sealer

    rec = freezing.freeze(spec, ids, reason, anchor=anchor(), sealer=sealer())
    out.print(f"frozen {rec.protocol_hash} in {freezing.log_path(spec)}")


@app.command()
@guarded
def amend(
    spec: SpecArg, reason: Annotated[str, typer.Option(help="why the protocol changed")]
) -> None:
    """Record an amendment: the new protocol_hash with its parent and the reason."""
    s = load_spec(spec)
    ids = compute(s, spec)
    from runner.cli.options import anchor, sealer

    rec = freezing.amend(spec, ids, reason, anchor=anchor(), sealer=sealer())
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
