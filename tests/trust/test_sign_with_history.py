"""`bench keys sign` of a bundle another evaluator judged (runner/signing/run.py): signed only once
that evaluator, found in git history, reproduces it; a byte changed in a result is refused."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.protocol.runfile import read_protocol
from tests.keys import TestKey
from tests.reproducibility.test_published import BUNDLES, needs_history

OLDER = [b for b in BUNDLES if read_protocol(b).identities.evaluator_digest != evaluator_digest()]

pytestmark = [needs_history, pytest.mark.uv, pytest.mark.slow]


def _older() -> Path:
    if not OLDER:
        pytest.skip("optional: every published bundle was made by this evaluator")
    return OLDER[-1]


def _signatures(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "signatures").glob("*"))}


def _sign(run: Path, key: TestKey) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["keys", "sign", str(run), "--dir", str(key.key_dir)])
    return res.exit_code, res.output


def test_an_older_evaluators_bundle_is_signed_once_it_reproduces(tmp_path: Path) -> None:
    key = TestKey.create(tmp_path)
    copy = tmp_path / "bundle"
    shutil.copytree(_older(), copy)
    code, output = _sign(copy, key)
    assert code == 0, output
    assert re.search(r"reproduced by its own evaluator sha256:[0-9a-f]{64} \(commit ", output)
    assert f"with key {key.keyid[:16]}" in output


def test_an_older_evaluators_bundle_with_a_byte_changed_is_not_signed(tmp_path: Path) -> None:
    key = TestKey.create(tmp_path)
    copy = tmp_path / "bundle"
    shutil.copytree(_older(), copy)
    card = sorted((copy / "results").glob("*/scorecard.json"))[0]
    data = card.read_bytes()
    found = re.search(rb'"cells":[0-9]', data)
    assert found is not None
    i = found.end() - 1
    card.write_bytes(data[:i] + (b"9" if data[i : i + 1] != b"9" else b"8") + data[i + 1 :])
    before = _signatures(copy)
    code, output = _sign(copy, key)
    assert code == 3, output
    assert "not signed" in output and "does not reproduce it" in output, output
    assert "reproduced by its own evaluator" not in output
    assert _signatures(copy) == before  # nothing signed
