"""`bench verify` of a user's own unsigned run says what it verified, how to sign it and what
`--allow-unsigned` means (issue 24); a run whose signature is *wrong* is not told that story."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from runner.cli.main import app
from tests.keys import TestKey

cli = CliRunner()


def test_an_unsigned_run_is_told_how_to_sign_it(make_run: Callable[..., Path],
                                                key: TestKey) -> None:  # fmt: skip
    run = make_run(signed=False)
    res = cli.invoke(app, ["verify", str(run)])
    assert res.exit_code == 3, res.output
    assert "journals, blobs, protocol and results all re-derive" in res.output
    assert f"bench keys sign {run}" in res.output
    assert "--allow-unsigned" in res.output and "never a publication" in res.output
    # and the hint's two ways out both work
    assert cli.invoke(app, ["verify", "--allow-unsigned", str(run)]).exit_code == 0
    signed = cli.invoke(app, ["keys", "sign", str(run)])
    assert signed.exit_code == 0, signed.output
    ok = cli.invoke(app, ["verify", str(run)])
    assert ok.exit_code == 0 and "signed by a trusted key" in ok.output, ok.output


def test_a_tampered_unsigned_run_names_the_evidence_not_the_signing_hint(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    run = make_run(signed=False)
    card = run / "results" / "a" / "scorecard.json"
    doc = json.loads(card.read_bytes())
    doc["subject_id"] = "someone-else"
    card.write_text(json.dumps(doc))
    res = cli.invoke(app, ["verify", str(run)])
    assert res.exit_code == 3 and "verify failed" in res.output
    assert "bench keys sign" not in res.output and "all re-derive" not in res.output


def test_a_wrong_signature_is_not_called_unsigned(
    make_run: Callable[..., Path], other_key: TestKey, key: TestKey
) -> None:
    run = make_run(signed=False)
    other_key.sign(run)  # a key nobody trusts
    res = cli.invoke(app, ["verify", str(run)])
    assert res.exit_code == 3 and "untrusted key" in res.output
    assert "bench keys sign" not in res.output
