"""A broken agent is told apart from a working one at a glance, in a real draft run: the same
MCP agent twice, once with an argv typo. `--only fault=baseline` runs just their baseline cells
(a subset, so a draft) of a spec that also declares a fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.subjects.agents import bench, fault_blocks, make_spec, mcp_agent_block, run_draft

pytestmark = pytest.mark.runtime


def test_an_argv_typo_reads_unlike_a_working_agent(tmp_path: Path) -> None:
    working = mcp_agent_block()
    typo = working.replace('id = "mcp-agent"', 'id = "typo-agent"').replace(
        "venv/bin/python", "venv/bin/pythno"
    )
    assert typo != working
    spec = make_spec(tmp_path, working + typo, fault_blocks("lost-submit-response"))
    proc, run_dir = run_draft(spec, tmp_path / "out", "--only", "fault=baseline")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # a draft: no card
    assert not list(run_dir.glob("results/*/scorecard.json"))
    rows = {
        r["subject_id"]: r
        for r in map(
            json.loads, (run_dir / "results/draft-diagnostics.jsonl").read_text().split("\n")[:-1]
        )
    }
    assert set(rows) == {"mcp-agent", "typo-agent"}  # the subset: baseline cells only
    assert {r["fault_id"] for r in rows.values()} == {"none"}
    ok, broken = rows["mcp-agent"], rows["typo-agent"]
    # the working agent (its patch is a placeholder: graded FAILED) ran: exit 0, its tool
    # calls, its submit committed
    assert [x["exit_code"] for x in ok["launches"]] == [0]
    assert ok["tool_calls"] == 2 and ok["committed_effects"] == 1
    # the broken one: a non-zero exit at once, no call of any kind, and why, in its stderr tail
    (launch,) = broken["launches"]
    assert launch["exit_code"] not in (0, None) and launch["signal"] is None
    assert broken["tool_calls"] == 0 and broken["model_calls"] == 0
    assert broken["committed_effects"] == 0 and broken["status"] == "FAILED"
    assert "pythno" in launch["stderr_tail"], launch
    # at a glance: the console table, the Markdown and the HTML, each "draft: not a result"
    out = proc.stdout
    assert "draft: not a result" in out and "typo-agent" in out and "pythno" in out
    md = (run_dir / "results/draft-diagnostics.md").read_text()
    assert "draft: not a result" in md and f"exit {launch['exit_code']}" in md
    html = (run_dir / "results/report.html").read_text()
    assert 'id="draft-diagnostics"' in html and "pythno" in html
    # derived from the evidence: verify re-derives every byte
    check = bench("verify", str(run_dir))
    assert check.returncode == 0, check.stdout + check.stderr
