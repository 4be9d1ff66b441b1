"""The model proxy's record and replay modes in full attempts (real netns, sandbox, subject uid).

A `command:` subject that speaks MCP asks its model one question through OPENAI_BASE_URL and puts
the answer into its submit. Run 1 records against a real local upstream (the key only in the
harness's environment); run 2 replays the cassette run 1 recorded, with the upstream no longer
asked. Read from the destination's own ledger: the agent got the same answer both times. The
recorded and the served cassettes are blobs named by `attempt_ended`, both runs verify, and no
byte of the upstream key is anywhere in either run directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.runtime.cassettes.load import load_cassette
from runner.runtime.subjects.tree import tree_digest
from tests.model_proxy.conftest import KEY_ENV, UPSTREAM_KEY, FakeUpstream, serve_upstream
from tests.subjects.agents import (
    TASK,
    attempts,
    bench,
    blob,
    ledger_items,
    make_spec,
    mcp_agent_block,
    run_draft,
)

pytestmark = pytest.mark.runtime


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with serve_upstream() as up:
        yield up


def _block(model: str) -> str:
    return mcp_agent_block("--model-call", tail=f"\n[subjects.config.model]\n{model}")


def _ended(run_dir: Path) -> dict:
    (rs,) = attempts(run_dir)
    (end,) = [r for r in rs if r["type"] == "attempt_ended"]
    assert end["outcome"] == "subject_finished", end
    return end


def _no_key_anywhere(run_dir: Path) -> None:
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert UPSTREAM_KEY.encode() not in path.read_bytes(), path


def test_record_then_replay_in_full_attempts(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = upstream.address
    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)  # the harness's environment, never the subject's
    record = (
        f'mode = "record"\nprovider = "openai"\nupstream = "http://{host}:{port}/v1"\n'
        f'key_env = "{KEY_ENV}"\n'
    )
    proc, run1 = run_draft(make_spec(tmp_path / "rec", _block(record)), tmp_path / "rec" / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    assert upstream.count == 1
    end = _ended(run1)
    assert "served_cassette" not in end  # record serves no cassette
    recorded = blob(run1, end["recorded_cassette"])
    (item,) = ledger_items(run1)
    assert item["payload"]["model_answer"] == "upstream answer 1"
    _no_key_anywhere(run1)
    assert bench("verify", "--allow-unsigned", str(run1)).returncode == 0

    # run 2: replay what run 1 recorded; the upstream is not asked again
    folder = tmp_path / "rep" / "spec" / "recorded"  # beside the spec make_spec writes
    folder.mkdir(parents=True)
    (folder / f"{TASK}.json").write_bytes(recorded)
    assert load_cassette(folder / f"{TASK}.json").kind == "recorded"
    replay = f'mode = "replay"\ncassettes = "recorded"\ndigest = "{tree_digest(folder)}"\n'
    spec2 = make_spec(tmp_path / "rep", _block(replay))
    proc, run2 = run_draft(spec2, tmp_path / "rep" / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert upstream.count == 1  # served from the cassette
    end2 = _ended(run2)
    assert blob(run2, end2["served_cassette"]) == recorded
    assert "recorded_cassette" not in end2
    (item2,) = ledger_items(run2)
    assert item2["payload"]["model_answer"] == "upstream answer 1"
    _no_key_anywhere(run2)
    assert bench("verify", "--allow-unsigned", str(run2)).returncode == 0
    assert json.loads(recorded)["kind"] == "recorded"
