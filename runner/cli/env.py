"""`bench env observe | check`: this machine's controlled factors, and conformance of artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from runner.cli.app import EXIT_REFUSED, app, guarded, out

env_app = typer.Typer(
    name="env",
    help="Controlled environment factors: observe this machine, check artifacts' conformance.",
    no_args_is_help=True,
)
app.add_typer(env_app, name="env")

SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec", help="take the factors and sources from this spec (default policy: none)"
    ),
]


def _say(text: str) -> None:
    out.print(text, markup=False)


def _dump(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)


@env_app.command("observe")
@guarded
def observe_cmd(
    spec: SpecOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the artifact as JSON")] = False,
    output: Annotated[
        Path | None, typer.Option("--out", "-o", help="also write the artifact (JSON) here")
    ] = None,
    http_base: Annotated[
        str | None,
        typer.Option("--http-base", help="base URL for http sources whose endpoint is a path"),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="the sandbox image a podman source's {image} names "
            "(default: the spec's [grader].image, by its input-derived tag)"
        ),
    ] = None,
) -> None:
    """Observe this machine's controlled factors and print the execution-environment artifact."""
    from runner.envcheck import observe

    env = observe(spec, http_base=http_base, image=image)
    doc = env.to_json()
    if output is not None:
        output.write_text(_dump(doc) + "\n", encoding="utf-8")
    if json_out:
        print(_dump(doc))
        return
    table = Table()
    for col in ("factor", "raw", "normalized", "source", "read"):
        table.add_column(col, overflow="fold")
    for o in env.observations:
        read = "ok" if o.shape.ok else "FAILED: " + ", ".join(o.shape.reason_codes)
        table.add_row(o.factor_id, repr(o.raw_value), repr(o.normalized_value), o.source.id, read)
    out.print(table)
    _say(f"execution_environment_hash {env.execution_environment_hash}")
    _say(f"observed_under (controlled_factors_hash) {env.observed_under}")


@env_app.command("check")
@guarded
def check_cmd(
    artifacts: Annotated[
        list[Path], typer.Argument(help="one artifact (a run) or two or more (a pair or set)")
    ],
    spec: SpecOpt = None,
    purpose: Annotated[
        str,
        typer.Option(
            "--purpose",
            help="cross_subject (default) or overhead_pair (the stricter tolerances apply)",
        ),
    ] = "cross_subject",
    json_out: Annotated[bool, typer.Option("--json", help="print the proof as JSON")] = False,
) -> None:
    """Check artifacts under the policy: exit 0 when they conform, 4 when refused (with reasons)."""
    from runner.envcheck import check

    proof = check(artifacts, spec, purpose)
    if json_out:
        print(_dump(proof.to_json()))
    else:
        _say(f"decision: {proof.decision}  ({proof.scope}, purpose {proof.purpose})")
        if proof.reason_codes:
            _say("reasons: " + ", ".join(proof.reason_codes))
        for f in proof.findings:
            tag = "refuses" if f.action == "fail_closed" else "recorded"
            _say(f"  [{tag}] {f.factor_id}: {f.reason_code} ({f.stage}): {f.detail}")
        _say(f"proof_hash {proof.proof_hash}")
    if not proof.conform:
        raise typer.Exit(EXIT_REFUSED)
