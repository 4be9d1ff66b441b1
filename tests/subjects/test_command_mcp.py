"""A `command:` subject in its own locked uv environment that speaks only MCP: the spec's tools
reach it at AFB_MCP_URL, its sandbox call and its submit pass the same trigger engine (per-tool
counts) and the submit lands in the destination's ledger exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evaluator.protocol.subjects import tree_digest
from tests.subjects.agents import ROOT, ledger_items, make_spec, records, run_draft

pytestmark = pytest.mark.runtime

PROJECT = "tests/subjects/mcp-agent"


def test_an_mcp_command_subject_runs(tmp_path: Path) -> None:
    block = f"""
[[subjects]]
id = "mcp-agent"
agent = "command:mcp-agent"

[subjects.config]
argv = ["{{env}}/venv/bin/python", "{{project}}/agent.py"]
mcp = true

[subjects.config.environment]
kind = "uv"
project = "{PROJECT}"
digest = "{tree_digest(ROOT / PROJECT)}"
"""
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
        ["exec", "list_effects", "read_file", "run_tests", "submit_patch", "write_file"]
    )
