"""`bench reproduce` says REPRODUCED only for a bundle a trusted key signed, every file as signed,
every result re-derived; `--allow-unsigned` is the explicit opt-out for a local run."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.reproduce import reproduce
from tests.keys import TestKey

cli = CliRunner()


def _reproduce(bundle: Path, *flags: str) -> tuple[int, str]:
    res = cli.invoke(app, ["reproduce", str(bundle), *flags])
    return res.exit_code, res.output


def test_a_signed_bundle_reproduces(make_run: Callable[..., Path], key: TestKey) -> None:
    code, output = _reproduce(make_run())
    assert code == 0, output
    assert "signature: every file is the one a trusted key signed" in output
    assert "REPRODUCED" in output and "NOT REPRODUCED" not in output


def test_an_unsigned_bundle_does_not_reproduce_unless_allowed(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    bundle = make_run(signed=False)
    code, output = _reproduce(bundle)
    assert code == 3 and "NOT REPRODUCED" in output and "run.dsse.json: missing" in output
    code, output = _reproduce(bundle, "--allow-unsigned")
    assert code == 0 and "not checked (--allow-unsigned)" in output, output


def test_a_forged_bundle_that_rederives_does_not_reproduce(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    honest, forged = make_run("b-ineligible"), make_run(signed=False)
    shutil.copytree(honest / "signatures", forged / "signatures")
    code, output = _reproduce(forged)
    assert code == 3 and "NOT REPRODUCED" in output and "signature:" in output
    assert "changed since it was signed" in output


def test_a_bundle_signed_by_another_key_does_not_reproduce(
    make_run: Callable[..., Path], key: TestKey, other_key: TestKey
) -> None:
    code, output = _reproduce(other_key.sign(make_run(signed=False)))
    assert code == 3 and "untrusted key" in output


def test_a_stray_file_named_differs_is_not_dropped(make_run: Callable[..., Path]) -> None:
    bundle = make_run(signed=False)
    (bundle / "differs").write_bytes(b"")
    problems = reproduce(bundle, evaluator_digest())
    assert any(p.startswith("differs") for p in problems), problems
