"""The freeze log's signed head from the CLI: the anchor `plan`, `freeze`, `amend` and `run`
check a spec's freeze log against (evaluator/trust/head.py `freeze_anchor`), the sealer `freeze`
and `amend` re-sign it with after every append (runner/signing/sign.py, one digest per record), and
`bench freeze-seal SPEC`, which signs the head of a log frozen before heads existed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import app, guarded, out
from runner.cli.options import KeyDir, TrustedOpt, sealer
from runner.evaluator.protocol import freeze as freezing


@app.command("freeze-seal")
@guarded
def freeze_seal(
    spec: Annotated[Path, typer.Argument(help="a spec file whose freeze log to seal")],
    trusted_keys: TrustedOpt = None,
    key_dir: KeyDir = None,
) -> None:
    """Sign the head of a spec's freeze log (after checking every record's seal and the chain,
    and that what an existing head signed is still there); then every append re-signs it."""
    from runner.evaluator.trust.head import freeze_prefix, head_path
    from runner.evaluator.trust.keys import trusted_keys as load_trusted

    seal = sealer(key_dir)
    records = freezing.seal(spec, seal, freeze_prefix(load_trusted(trusted_keys)))
    log = freezing.log_path(spec)
    out.print(f"signed the head of {log} ({len(records)} records): {head_path(log)}")
