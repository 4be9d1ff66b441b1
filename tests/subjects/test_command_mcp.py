"""A `command:` subject in its own locked uv environment that speaks only MCP: the spec's tools
reach it at AFB_MCP_URL, its sandbox call and its submit pass the same trigger engine (per-tool
counts) and the submit lands in the destination's ledger exactly once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runner.runtime.host.paths import SUBJECT_ROOT
from tests.subjects.agents import (
    attempts,
    bench,
    fault_blocks,
    ledger_items,
    make_spec,
    mcp_agent_block,
    records,
    run_draft,
    terminal_records,
)

pytestmark = pytest.mark.runtime


def test_an_mcp_command_subject_runs(tmp_path: Path) -> None:
    block = mcp_agent_block()
    spec = make_spec(tmp_path, block)
    proc, run_dir = run_draft(spec, tmp_path / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    rs = records(run_dir)
    (calls,) = [r for r in rs if r["type"] == "tool_calls"]
    assert calls["by_tool"] == {"exec": 1, "submit_patch": 1}, calls
    (exit_,) = [r for r in rs if r["type"] == "subject_exit"]
    assert exit_["exit_code"] == 0
    (item,) = ledger_items(run_dir)
    assert item["payload"]["tools"] == sorted(
        [
            "exec",
            "list_effects",
            "read_file",
            "run_tests",
            "submission_status",
            "submit_patch",
            "write_file",
        ]
    )
    # by default the subject's state directory (its own output) goes with the run's end
    assert not (SUBJECT_ROOT / run_id_of(run_dir)).exists()


def run_id_of(run_dir: Path) -> str:
    return run_dir.name.rsplit("-", 1)[1]


def test_keep_subject_dirs_keeps_the_agents_own_output_outside_the_evidence(
    tmp_path: Path,
) -> None:
    spec = make_spec(tmp_path, mcp_agent_block())
    proc, run_dir = run_draft(spec, tmp_path / "out", "--keep-subject-dirs")
    kept = SUBJECT_ROOT / run_id_of(run_dir)
    try:
        assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"subject state directories kept in {kept}" in proc.stdout
        (journal,) = sorted((run_dir / "journals").glob("*-a*.jsonl"))
        state = kept / journal.stem  # one per attempt, named like its journal
        (line,) = (state / "stdout.log").read_text().splitlines()
        report = json.loads(line)  # what the agent printed
        assert not report["submit_error"] and "hello-from-mcp" in json.dumps(report["exec"])
        assert (state / "report.json").is_file() and (state / "stderr.log").is_file()
        assert (state.stat().st_uid, state.stat().st_mode & 0o777) == (0, 0o700)  # closed
        # not evidence: the run directory verifies with nothing of it inside
        assert bench("verify", str(run_dir)).returncode == 0
        assert not any("stdout.log" in p.name for p in run_dir.rglob("*"))
    finally:
        shutil.rmtree(kept, ignore_errors=True)


PARTITION = fault_blocks("partition-during-submit")


def test_a_partition_cuts_an_mcp_subject_off_its_endpoint_and_is_witnessed(
    tmp_path: Path,
) -> None:
    """The MCP endpoint is the subject's one path to every tool, so the partition drops exactly
    that path while the submit is held there: the held call is closed without an answer, the
    agent's next connect is dropped (the counter moves), the release lets its retry through,
    and the submit (never forwarded before the cut) lands once."""
    block = mcp_agent_block(
        "--retry-submit", tail="\n[subjects.config.limits]\ntimeout_s = 180.0\n"
    )
    spec = make_spec(tmp_path, block, PARTITION)
    proc, run_dir = run_draft(spec, tmp_path / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    partitioned = [
        rs for rs in attempts(run_dir)
        if any(r["type"] == "attempt_started" and r["fault_id"] != "none" for r in rs)
    ]  # fmt: skip
    (rs,) = partitioned
    states = [r["state"] for r in rs if r["type"] == "lifecycle"]
    assert states == ["scheduled", "armed", "injected", "witnessed", "released"], states
    (receipt,) = [r for r in rs if r["type"] == "actuator_receipt"]
    assert receipt["applied"], receipt
    (end,) = [r for r in rs if r["type"] == "attempt_ended"]
    assert end["outcome"] == "subject_finished", end
    (exit_,) = [r for r in rs if r["type"] == "subject_exit"]
    assert exit_["exit_code"] == 0
    (grade,) = [r for r in rs if r["type"] == "grader_result"]
    assert grade["committed_effects"] == 1  # the cut call was never forwarded; the retry landed
    terminal = {t.cell_id: t for ts in terminal_records(run_dir).values() for t in ts}
    cell = rs[0]["cell_id"]
    assert terminal[cell].status.value in ("COMPLETED", "FAILED"), terminal[cell]  # witnessed
