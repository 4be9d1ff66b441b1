"""A `command:` subject cannot read the upstream model key, the evidence store, or another
attempt's state (real processes, each attempt's subject under its own uid in its own netns)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.evaluator.protocol.matrix import cells_for, resolve
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.attempt.api import journal_name
from tests.subjects.agents import ROOT, ledger_items, make_spec

pytestmark = pytest.mark.runtime

SUBJECT = ROOT / "tests" / "subjects" / "iso_subject.py"


def _block(name: str, env: dict[str, str]) -> str:
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in sorted(env.items()))
    return f"""
[[subjects]]
id = "iso-{name}"
agent = "command:iso"

[subjects.config]
argv = ["/usr/bin/python3", "-I", "{SUBJECT}"]
env = {{ {pairs}, AFB_TEST_NAME = "{name}" }}

[subjects.config.model]
mode = "live"
upstream = "http://127.0.0.1:9/v1"
key_env = "AFB_TEST_UPSTREAM_KEY"
"""


@pytest.fixture
def public_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="afb-iso-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_subject_cannot_read_the_key_the_evidence_or_another_attempt(
    tmp_path: Path, public_dir: Path
) -> None:
    from tests.subjects.agents import bench

    key = "sk-afb-upstream-" + secrets.token_hex(16)
    siblings = public_dir / "siblings.json"
    out = tmp_path / "out"
    env = {
        "AFB_TEST_SECRET_SHA256": hashlib.sha256(key.encode()).hexdigest(),
        "AFB_TEST_SIBLINGS": str(siblings),
        "AFB_TEST_OUT": str(out),
    }
    spec = make_spec(tmp_path, _block("a", env) + _block("b", env))
    parsed = load_spec(spec)
    matrix = resolve(parsed)
    names = [
        journal_name(c.cell_id, 1)
        for sid, h in sorted(matrix.subjects.items())
        for c in cells_for(matrix.slots, sid, h)
    ]
    assert len(names) == 2
    siblings.write_text(json.dumps(names))
    os.chmod(siblings, 0o644)

    old = os.environ.get("AFB_TEST_UPSTREAM_KEY")
    os.environ["AFB_TEST_UPSTREAM_KEY"] = key  # the harness has the key; the subject must not
    try:
        proc = bench("run", str(spec), "--draft", "--out", str(out), "--jobs", "1")
    finally:
        if old is None:
            del os.environ["AFB_TEST_UPSTREAM_KEY"]
        else:
            os.environ["AFB_TEST_UPSTREAM_KEY"] = old
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    reports = {i["payload"]["state"]: i["payload"] for i in ledger_items(run_dir)}
    assert sorted(reports) == sorted(names)
    first, second = (reports[n] for n in names)
    for r in (first, second):
        assert r["uid"] not in (0, 65534), r
        assert r["secret_in_own_env"] is False
        assert r["environ_hits"] == [], r  # no process environment it can read holds the key
        assert r["environ_readable"] >= 1  # the scan works: at least its own environ was read
        assert r["openai_key"] and r["openai_key"] != key
        assert r["openai_base_url"].startswith("http://198.18.")
        assert r["task_file_id"] == "cachetools-cached-info" and r["home_is_state"]
        assert r["list_subject_root"] == "PermissionError"
        assert r["list_out"] == "PermissionError"  # the evidence store's folder
    # The first attempt's state survives (until the run ends) but is closed to later subjects.
    assert second["siblings"] == {names[0]: "PermissionError"}, second
    assert first["siblings"][names[1]] in ("FileNotFoundError", "PermissionError"), first
    # and nothing of the key reached the evidence
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
