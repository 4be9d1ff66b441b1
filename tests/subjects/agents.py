"""Helpers for the subject tests: a one-task draft spec built from specs/swe-lite-agents.toml.

The spec is written into a temporary folder with copies of the task and the cassettes it needs
(a spec's task and cassette paths must stay inside its own folder), so a test runs exactly the
subjects and faults it is about, through the real `bench run` path (adapters, executor, attempt).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.publish.results import derive
from runner.evaluator.verdict.outcomes import TerminalRecord

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "specs" / "swe-lite-agents.toml"
TASK = "cachetools-cached-info"


SCRIPTED = Path(__file__).resolve().parent / "scripted-subjects.toml"


def subject_block(name: str) -> str:
    """The `[[subjects]]` block whose id is `name`: of swe-lite-agents.toml, else of
    scripted-subjects.toml (the turn-by-turn scripted subjects of swe-lite-agents 1.0.0)."""
    for source in (AGENTS, SCRIPTED):
        text = source.read_text()
        blocks = re.split(r"(?m)^(?=\[\[subjects\]\])", text.split("[[faults]]")[0])
        for b in blocks:
            if b.startswith("[[subjects]]") and f'id = "{name}"' in b:
                return b.rstrip() + "\n"
    raise KeyError(name)


def fault_blocks(*ids: str) -> str:
    """The `[[faults]]` blocks of swe-lite-agents.toml with these ids (every one without ids)."""
    text = AGENTS.read_text()
    section = text[text.index("[[faults]]") : text.index("[matrix]")]
    chosen = []
    for b in re.split(r"(?m)^(?=\[\[faults\]\])", section):
        m = re.search(r'(?m)^id = "([^"]+)"', b)
        if b.startswith("[[faults]]") and m and (not ids or m[1] in ids):
            lines = [ln for ln in b.splitlines() if not ln.startswith("#")]
            chosen.append("\n".join(lines).strip() + "\n\n")
    if ids and len(chosen) != len(ids):
        raise KeyError(f"not all of {ids} are faults of {AGENTS.name}")
    return "".join(chosen)


MCP_AGENT = "tests/subjects/mcp-agent"  # a minimal MCP agent in its own uv environment


def mcp_agent_block(*flags: str, tail: str = "") -> str:
    """A `[[subjects]]` block of the MCP test agent (`command:`, mcp = true) run with `flags`;
    `tail` adds further config tables (a model, limits)."""
    from runner.runtime.subjects.tree import tree_digest

    argv = ", ".join(f'"{a}"' for a in ("{env}/venv/bin/python", "{project}/agent.py", *flags))
    return f"""
[[subjects]]
id = "mcp-agent"
agent = "command:mcp-agent"

[subjects.config]
argv = [{argv}]
mcp = true

[subjects.config.environment]
kind = "uv"
project = "{MCP_AGENT}"
digest = "{tree_digest(ROOT / MCP_AGENT)}"
{tail}"""


def make_spec(tmp: Path, subjects: str, faults: str = "", task: str = TASK) -> Path:
    """A draft spec in `tmp`: one task, the given subject and fault TOML blocks."""
    text = AGENTS.read_text()
    head = text[: text.index("[[task_sets]]")]
    tail = text[text.index("[matrix]") :]
    tasks = (
        '[[task_sets]]\nid = "swe-lite"\nbuckets = ["easy", "hard"]\n'
        f'tasks = [{{ id = "{task}", bucket = "hard", path = "swe-lite/{task}" }}]\n\n'
    )
    spec = tmp / "spec" / "agents-test.toml"
    (spec.parent / "swe-lite").mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "specs" / "swe-lite" / task, spec.parent / "swe-lite" / task)
    shutil.copy(ROOT / "specs" / "swe-lite" / "sources.toml", spec.parent / "swe-lite")
    for folder in ("cassettes", "control-cassettes"):
        shutil.copytree(
            ROOT / "specs" / "swe-lite-agents" / folder, spec.parent / "swe-lite-agents" / folder
        )
    spec.write_text(head + tasks + subjects + "\n" + faults + "\n" + tail)
    return spec


def bench(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli.main", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_draft(spec: Path, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    proc = bench("run", str(spec), "--draft", "--out", str(out), "--jobs", "1", *extra)
    runs = list(out.iterdir()) if out.exists() else []
    return proc, (runs[0] if len(runs) == 1 else out)


def terminal_records(run_dir: Path) -> dict[str, list[TerminalRecord]]:
    _, results, _ = derive(run_dir, evaluator_digest())
    return {s: r.evaluation.terminal_records for s, r in results.items()}


def attempts(run_dir: Path) -> list[list[dict[str, Any]]]:
    """Each attempt journal's records, as JSON, one list per attempt."""
    return [
        [e.record.model_dump(mode="json") for e in read_journal(path)]
        for path in sorted((run_dir / "journals").glob("*-a*.jsonl"))
    ]


def attempts_by_fault(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each attempt's records by its fault id, for a run of one subject (one attempt a cell)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rs in attempts(run_dir):
        (started,) = [r for r in rs if r["type"] == "attempt_started"]
        assert started["fault_id"] not in out  # one attempt per cell
        out[started["fault_id"]] = rs
    return out


def records(run_dir: Path) -> list[dict[str, Any]]:
    """Every attempt journal's records, as JSON (attempt journals only)."""
    out = []
    for path in sorted((run_dir / "journals").glob("*-a*.jsonl")):
        out.extend(e.record.model_dump(mode="json") for e in read_journal(path))
    return out


def blob(run_dir: Path, address: str) -> bytes:
    return (run_dir / "blobs" / "sha256" / address.removeprefix("sha256:")).read_bytes()


def ledger_items(run_dir: Path) -> list[dict[str, Any]]:
    """The destination's own ledger(s) of the run (archived as blobs by the attempts)."""
    items = []
    for r in records(run_dir):
        if r["type"] == "attempt_ended" and r.get("ledger"):
            for line in blob(run_dir, r["ledger"]).decode().splitlines():
                if line.strip():
                    items.append(json.loads(line))
    return items


# --- shared by the scripted-model subject tests (test_claude_code.py, test_openai_agents.py) ---

ToolCall = Callable[..., list[dict[str, Any]]]  # (n, tool, **arguments) -> the turn's tool calls


def fix_turns(task: dict[str, Any], call: ToolCall, *, check: bool = False) -> list[dict[str, Any]]:
    """What a capable model would answer, turn by turn, with the benchmark's MCP tools: look,
    copy and read, fix, run the failing tests in a scratch copy with the upstream test changes,
    submit the diff, with `check` list what the destination committed (a read-only check), then
    say it is done. `call` writes a tool call in the subject's own form (its ids, its tool names).
    A scripted turn cannot depend on what the previous tool result was."""
    tid, src, first = task["task_id"], task["src"], task["files"][0]
    work, pp = f"/tmp/work/{tid}", task.get("pythonpath") or "."
    tests = " ".join(task["fail_to_pass"])
    patch = ["patch", "-p1", "--forward", "--no-backup-if-mismatch"]
    copy = (
        f"rm -rf {work} && mkdir -p {work} && cp -a {src} {work}/b && head -n 40 {work}/b/{first}"
    )
    turns = [
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
    ]  # fmt: skip
    if check:
        check_turn = {"text": "Let me check that the submission landed."}
        turns.append({**check_turn, "tool_calls": call(5, "list_effects")})
    return [*turns, {"text": "I submitted the fix for the task."}]


def write_cassette(spec_dir: Path, name: str, turns: Callable[[dict[str, Any]], list[Any]]) -> Path:
    """The scripted cassette of TASK, `turns` of its oracle view (the scripted model's), written
    into `spec_dir`/`name`/cassettes; that folder."""
    from runner.benchmarks.swe_lite.agentview import oracle_task
    from runner.benchmarks.swe_lite.grade import load_task

    folder = spec_dir / name / "cassettes"
    folder.mkdir(parents=True)
    task = oracle_task(load_task(ROOT / "specs" / "swe-lite" / TASK))
    cassette = {"version": 1, "kind": "scripted", "model": "afb-scripted"}
    cassette["turns"] = turns(task)
    (folder / f"{TASK}.json").write_text(json.dumps(cassette, indent=1, sort_keys=True) + "\n")
    return folder


def scripted_tables(name: str, folder: Path) -> str:
    """A subject's `[subjects.config.model]` (the cassettes `write_cassette(_, name, _)` wrote
    into `folder`) and `[subjects.config.limits]` tables."""
    from runner.runtime.subjects.tree import tree_digest

    return f"""
[subjects.config.model]
mode = "scripted"
cassettes = "{name}/cassettes"
digest = "{tree_digest(folder)}"

[subjects.config.limits]
max_relaunches = 3
timeout_s = 300.0
"""


def one(rs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The attempt's one record of type `kind`."""
    (r,) = [r for r in rs if r["type"] == kind]
    return r


def attempt_ledger(run_dir: Path, rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The destination's ledger archived by this attempt."""
    lines = blob(run_dir, one(rs, "attempt_ended")["ledger"]).decode().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def check_witnessed(
    rs: list[dict[str, Any]], fault: str, label: object, outcome: str = "subject_finished"
) -> None:
    """A fault cell's fault was witnessed (never rejected), a baseline cell has no fault
    lifecycle; the attempt ended with `outcome` (the subject finished, unless told otherwise)
    without a harness error. `label` names the cell."""
    states = [r["state"] for r in rs if r["type"] == "lifecycle"]
    if fault == "none":
        assert states == []
    else:
        assert "witnessed" in states and "rejected" not in states, (label, states)
    assert one(rs, "attempt_ended")["outcome"] == outcome, label
    assert not [r for r in rs if r["type"] == "harness_error"], label


def check_attempt(
    run_dir: Path,
    rs: list[dict[str, Any]],
    calls: dict[str, int],
    launches: list[tuple[int, bool]],
    effects: int,
    completed: bool,
    exit_code: int = 0,
) -> None:
    """What the harness's evidence says the subject did in one attempt: its per-tool calls, its
    launches ((restart index, signaled) each, the last one exiting `exit_code`), the effects in
    the destination's ledger, the grade and the cell's terminal status."""
    assert one(rs, "tool_calls")["by_tool"] == calls
    exits = [r for r in rs if r["type"] == "subject_exit"]
    assert [(e["restart_index"], e["signaled"]) for e in exits] == launches
    assert exits[-1]["exit_code"] == exit_code
    ledger = attempt_ledger(run_dir, rs)
    assert len(ledger) == effects
    assert all(item["payload"]["task"] == TASK for item in ledger)
    grade = one(rs, "grader_result")
    assert grade["completed"] is completed and grade["committed_effects"] == effects
    terminal = {t.cell_id: t for ts in terminal_records(run_dir).values() for t in ts}
    status = terminal[rs[0]["cell_id"]].status.value
    assert status == ("COMPLETED" if completed else "FAILED"), status
