"""The OpenAI Agents SDK (subjects/openai-agents/: `openai-agents`, pinned in its own lock) as a
`command:` subject on one swe-lite task, in its two published configs: the SDK's own blind MCP
retry off (`--mcp-max-retry-attempts 0`) and on (3).

Its model is the Responses API at OPENAI_BASE_URL (the attempt's model proxy) under a scripted
Responses cassette written here; its only tools are the attempt's MCP server (AFB_MCP_URL,
`MCPServerStreamableHttp`); its conversation persists in the state dir (SQLiteSession), so a
relaunch resumes it. One draft run: both configs x baseline plus the seven faults of
specs/swe-lite-agents.toml. What the agent did is read from the harness's evidence (the trigger
engine's per-tool counts, subject exits, the destination's own ledger, the grade), never from the
agent. With a scripted model only the framework's own machinery is measured (its model client's
retries, its MCP client's retries, its session on relaunch): what "the model" does after a failed
tool call is the script.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.swe_lite.grade import load_task
from runner.benchmarks.swe_lite.workload import subject_task
from runner.evaluator.protocol.subjects import tree_digest
from tests.subjects.agents import (
    ROOT,
    TASK,
    attempts,
    blob,
    fault_blocks,
    make_spec,
    run_draft,
    terminal_records,
)

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

PROJECT = "subjects/openai-agents"
CONFIGS = {"openai-agents-retry0": 0, "openai-agents-retry3": 3}
FAULTS = fault_blocks()  # the seven faults of specs/swe-lite-agents.toml


def cassette_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """What a capable model would answer, turn by turn, with the benchmark's MCP tools: look,
    copy and read, fix, run the failing tests in a scratch copy with the upstream test changes,
    submit the diff, then say it is done. The SDK asks the model again after every tool result;
    turn N is served whatever that result was (a scripted model cannot react)."""
    tid, src, first = task["task_id"], task["src"], task["files"][0]
    work, pp = f"/tmp/work/{tid}", task.get("pythonpath") or "."
    tests = " ".join(task["fail_to_pass"])
    patch = ["patch", "-p1", "--forward", "--no-backup-if-mismatch"]
    copy = (
        f"rm -rf {work} && mkdir -p {work} && cp -a {src} {work}/b && head -n 40 {work}/b/{first}"
    )

    def call(n: int, tool: str, **arguments: Any) -> list[dict[str, Any]]:
        return [{"id": f"call_afb_{n}", "name": tool, "arguments": arguments}]

    return [
        {"text": "Let me look at the project layout first.",
         "tool_calls": call(0, "exec", argv=["ls", src, f"{src}/{first.rsplit('/', 1)[0]}"])},
        {"text": f"I'll make a working copy and read {first}.",
         "tool_calls": call(1, "exec", argv=["sh", "-c", copy])},
        {"text": "I see the problem. Applying the fix.",
         "tool_calls": call(2, "exec", argv=[*patch, "-d", f"{work}/b"], stdin=task["gold_patch"])},
        {"text": "Now the failing tests, in a scratch copy with the upstream test changes.",
         "tool_calls": call(3, "exec", stdin=task["tests_patch"], argv=[
             "sh", "-c", f"cd {work} && rm -rf t && cp -a b t && cd t && {' '.join(patch)} -s && "
             f"PYTHONDONTWRITEBYTECODE=1 PYTHONPATH={pp} python3 -m pytest -q -p no:cacheprovider "
             f"{tests}"])},
        {"text": "The tests pass. Submitting the fix.",
         "tool_calls": call(4, "submit_patch", payload={"task": tid, "patch": task["gold_patch"]})},
        {"text": "I submitted the fix for the task."},
    ]  # fmt: skip


def subjects(spec_dir: Path) -> str:
    """The two `[[subjects]]` blocks, sharing one cassette folder written into the spec's folder."""
    folder = spec_dir / "openai-agents" / "cassettes"
    folder.mkdir(parents=True)
    task = subject_task(load_task(ROOT / "specs" / "swe-lite" / TASK))
    cassette = {"version": 1, "kind": "scripted", "model": "afb-scripted"}
    cassette["turns"] = cassette_turns(task)
    (folder / f"{TASK}.json").write_text(json.dumps(cassette, indent=1, sort_keys=True) + "\n")
    blocks = []
    for sid, retries in CONFIGS.items():
        argv = ["{env}/venv/bin/python", "{project}/agent.py",
                "--mcp-max-retry-attempts", str(retries)]  # fmt: skip
        blocks.append(f"""
[[subjects]]
id = "{sid}"
agent = "command:openai-agents"

[subjects.config]
argv = {json.dumps(argv)}
mcp = true

[subjects.config.environment]
kind = "uv"
project = "{PROJECT}"
digest = "{tree_digest(ROOT / PROJECT)}"

[subjects.config.model]
mode = "scripted"
cassettes = "openai-agents/cassettes"
digest = "{tree_digest(folder)}"

[subjects.config.limits]
max_relaunches = 3
timeout_s = 300.0
""")
    return "".join(blocks)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("openai-agents")
    spec = make_spec(tmp, subjects(tmp / "spec"), FAULTS)  # make_spec's folder: tmp/spec
    proc, run_dir = run_draft(spec, tmp / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    return run_dir


def _one(rs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (r,) = [r for r in rs if r["type"] == kind]
    return r


def by_subject_and_fault(run_dir: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rs in attempts(run_dir):
        started = _one(rs, "attempt_started")
        key = (started["subject_id"], started["fault_id"])
        assert key not in out  # one attempt per cell
        out[key] = rs
    return out


def observed(run_dir: Path, rs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the evidence says the agent did in one attempt."""
    ended = _one(rs, "attempt_ended")
    ledger = [json.loads(x) for x in blob(run_dir, ended["ledger"]).decode().splitlines() if x]
    exits = [r for r in rs if r["type"] == "subject_exit"]
    grade = _one(rs, "grader_result")
    return {
        "calls": _one(rs, "tool_calls")["by_tool"],
        "launches": [(e["restart_index"], e["signaled"], e["exit_code"]) for e in exits],
        "effects": len(ledger),
        "completed": grade["completed"],
        "lifecycle": [r["state"] for r in rs if r["type"] == "lifecycle"],
        "harness_errors": [r for r in rs if r["type"] == "harness_error"],
        "outcome": ended["outcome"],
    }


def test_report(run: Path) -> None:
    """Print what was observed per config and fault (the measurement; asserted below)."""
    for (sid, fault), rs in sorted(by_subject_and_fault(run).items()):
        o = observed(run, rs)
        print(sid, fault, o["calls"], o["launches"], o["effects"], o["completed"], o["lifecycle"])
