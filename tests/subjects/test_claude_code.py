"""Claude Code, unmodified (the pinned native binary), as a `command:` subject on one swe-lite task.

Its only tools are the benchmark's, over MCP (`--tools ""` removes every built-in tool,
`--strict-mcp-config` every MCP server but the attempt's own, whose URL Claude Code expands from
`${AFB_MCP_URL}` in the config). Its model is a scripted Anthropic Messages cassette served by
the attempt's model proxy at ANTHROPIC_BASE_URL (dummy key; non-essential traffic off). One draft
run: baseline plus the seven faults of specs/swe-lite-agents.toml (on the submit, the sandbox and
the model calls). What Claude Code did is read from the harness's evidence (the trigger engine's
per-tool counts, subject exits, the destination's own ledger, the grade), never from Claude Code.
With a scripted model only Claude Code's own machinery is measured (its API client's retries, its
MCP client, its relaunch behaviour): what "the model" does after a failed tool call is the script.

Installed by scripts/setup-claude-code.sh (run by scripts/setup.sh): required, not optional.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.swe_lite.agentview import oracle_task
from runner.benchmarks.swe_lite.grade import load_task
from runner.evaluator.protocol.subjects import tree_digest
from tests.subjects.agents import (
    ROOT,
    TASK,
    attempts_by_fault,
    blob,
    fault_blocks,
    make_spec,
    run_draft,
    terminal_records,
)

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

VERSION = "2.1.328"
CLAUDE = Path("/var/lib/afb/claude-code") / VERSION / "bin" / "claude"
SERVER = "afb"  # the MCP server's name in Claude Code's config: tools are mcp__afb__<tool>
MCP_CONFIG = {"mcpServers": {SERVER: {"type": "http", "url": "${AFB_MCP_URL}"}}}
FLAGS = [
    "-p",  # print mode: one non-interactive run, the prompt from stdin (the task file)
    "--bare",  # no hooks, plugins, CLAUDE.md discovery, background prefetches, keychain
    "--tools", "",  # no built-in tool at all (no Bash, Read, Edit, WebFetch, ...)
    "--strict-mcp-config", "--mcp-config", json.dumps(MCP_CONFIG),
    "--allowedTools", f"mcp__{SERVER}",  # every tool of that server, without a prompt
    "--model", "afb-scripted",
    "--no-session-persistence",
    "--output-format", "json",
]  # fmt: skip
ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}

FAULTS = fault_blocks()  # the seven faults of specs/swe-lite-agents.toml


def cassette_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """What a capable model would answer, turn by turn, with the benchmark's MCP tools: look,
    copy and read, fix, run the failing tests in a scratch copy with the upstream test changes,
    submit the diff, then say it is done (Claude Code asks the model once more after every tool
    result; a scripted turn cannot depend on what that result was)."""
    tid, src, first = task["task_id"], task["src"], task["files"][0]
    work, pp = f"/tmp/work/{tid}", task.get("pythonpath") or "."
    tests = " ".join(task["fail_to_pass"])
    patch = ["patch", "-p1", "--forward", "--no-backup-if-mismatch"]
    copy = (
        f"rm -rf {work} && mkdir -p {work} && cp -a {src} {work}/b && head -n 40 {work}/b/{first}"
    )

    def call(n: int, tool: str, **arguments: Any) -> list[dict[str, Any]]:
        return [{"id": f"toolu_afb_{n}", "name": f"mcp__{SERVER}__{tool}", "arguments": arguments}]

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


def subject(spec_dir: Path) -> str:
    """The `[[subjects]]` block, with its cassette written into the spec's folder."""
    folder = spec_dir / "claude-code" / "cassettes"
    folder.mkdir(parents=True)
    task = oracle_task(load_task(ROOT / "specs" / "swe-lite" / TASK))  # the scripted model's
    cassette = {"version": 1, "kind": "scripted", "model": "afb-scripted"}
    cassette["turns"] = cassette_turns(task)
    (folder / f"{TASK}.json").write_text(json.dumps(cassette, indent=1, sort_keys=True) + "\n")
    # the task goes in as the prompt (stdin); Claude Code expands ${AFB_MCP_URL} itself
    argv = ["/bin/sh", "-c", 'exec "$0" "$@" < "$AFB_TASK_FILE"', str(CLAUDE), *FLAGS]
    return f"""
[[subjects]]
id = "claude-code"
agent = "command:claude-code"

[subjects.config]
argv = {json.dumps(argv)}
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in ENV.items())} }}
mcp = true

[subjects.config.model]
mode = "scripted"
cassettes = "claude-code/cassettes"
digest = "{tree_digest(folder)}"

[subjects.config.limits]
max_relaunches = 3
timeout_s = 300.0
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CLAUDE.is_file(), f"{CLAUDE} is missing: run scripts/setup-claude-code.sh (as root)"
    tmp = tmp_path_factory.mktemp("claude-code")
    spec = make_spec(tmp, subject(tmp / "spec"), FAULTS)  # make_spec's folder: tmp/spec
    proc, run_dir = run_draft(spec, tmp / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    return run_dir


def _one(rs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (r,) = [r for r in rs if r["type"] == kind]
    return r


def _ledger(rs: list[dict[str, Any]], run_dir: Path) -> list[dict[str, Any]]:
    lines = blob(run_dir, _one(rs, "attempt_ended")["ledger"]).decode().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


BASELINE = {"model": 6, "exec": 4, "submit_patch": 1}
# fault -> (per-tool calls, (restart index, signaled) per launch, effects in the ledger, completed)
EXPECTED: dict[str, tuple[dict[str, int], list[tuple[int, bool]], int, bool]] = {
    # six model turns (one per scripted turn: Claude Code makes no side calls), four sandbox
    # commands over MCP, one submit
    "none": (BASELINE, [(0, False)], 1, True),
    # Relaunched, `claude -p` starts a new session from the first turn (nothing in its state
    # says the submit happened): every call again, and the effect lands twice.
    "sigkill-after-submit-effect": (
        {"model": 11, "exec": 8, "submit_patch": 2},
        [(0, True), (1, False)],
        2,
        True,
    ),
    # Its MCP client does not send the call again (the tool result is an ECONNRESET error); the
    # scripted model's next turn ends the run: one effect, committed although never confirmed.
    "lost-submit-response": (BASELINE, [(0, False)], 1, True),
    # The held submit is cut before it is forwarded and, again, not retried: no effect at all.
    "partition-during-submit": (BASELINE, [(0, False)], 0, False),
    # The stale-session error is the first command's result; the script goes on.
    "restart-during-first-exec": (BASELINE, [(0, False)], 1, True),
    # Claude Code's API client retries a model call that got no answer (up to 10 times).
    "lost-model-response": ({**BASELINE, "model": 7}, [(0, False)], 1, True),
    "partition-during-model-call": ({**BASELINE, "model": 7}, [(0, False)], 1, True),
    # Killed while its fourth model call is answered: started over (4 + 6 model calls).
    "sigkill-mid-model-call": (
        {"model": 10, "exec": 7, "submit_patch": 1},
        [(0, True), (1, False)],
        1,
        True,
    ),
}


def test_every_fault_is_witnessed(run: Path) -> None:
    by_fault = attempts_by_fault(run)
    assert set(by_fault) == set(EXPECTED)
    for fault, rs in by_fault.items():
        states = [r["state"] for r in rs if r["type"] == "lifecycle"]
        if fault == "none":
            assert states == []
        else:
            assert "witnessed" in states and "rejected" not in states, (fault, states)
        assert _one(rs, "attempt_ended")["outcome"] == "subject_finished", fault
        assert not [r for r in rs if r["type"] == "harness_error"], fault


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_what_claude_code_did(run: Path, fault: str) -> None:
    calls, launches, effects, completed = EXPECTED[fault]
    rs = attempts_by_fault(run)[fault]
    assert _one(rs, "tool_calls")["by_tool"] == calls
    exits = [r for r in rs if r["type"] == "subject_exit"]
    assert [(e["restart_index"], e["signaled"]) for e in exits] == launches
    assert exits[-1]["exit_code"] == 0
    ledger = _ledger(rs, run)
    assert len(ledger) == effects
    assert all(item["payload"]["task"] == TASK for item in ledger)
    grade = _one(rs, "grader_result")
    assert grade["completed"] is completed and grade["committed_effects"] == effects
    terminal = {t.cell_id: t for ts in terminal_records(run).values() for t in ts}
    status = terminal[rs[0]["cell_id"]].status.value
    assert status == ("COMPLETED" if completed else "FAILED"), status
