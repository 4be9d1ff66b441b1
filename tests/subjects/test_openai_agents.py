"""The OpenAI Agents SDK (subjects/openai-agents/: `openai-agents`, pinned in its own lock) as a
`command:` subject on one swe-lite task, in its two published configs: the SDK's own blind MCP
retry off (`--mcp-max-retry-attempts 0`) and on (3).

Its model is the Responses API at OPENAI_BASE_URL (the attempt's model proxy) under a scripted
Responses cassette written here; its only tools are the attempt's MCP server (AFB_MCP_URL,
`MCPServerStreamableHttp`); its conversation persists in the state dir (SQLiteSession), so a
relaunch resumes it. One draft run: both configs x baseline plus the eight faults of
specs/swe-lite-agents.toml. What the agent did is read from the harness's evidence (the trigger
engine's per-tool counts, subject exits, the destination's own ledger, the grade), never from the
agent. With a scripted model only the framework's own machinery is measured (its model client's
retries, its MCP client's retries, its session on relaunch): what "the model" does after a failed
tool call is the script.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.swe_lite.agentview import oracle_task
from runner.benchmarks.swe_lite.grade import load_task
from runner.runtime.host.paths import SUBJECT_ROOT
from runner.runtime.subjects.tree import tree_digest
from tests.subjects.agents import (
    ROOT,
    TASK,
    attempts,
    check_attempt,
    check_witnessed,
    fault_blocks,
    fix_turns,
    make_spec,
    one,
    run_draft,
    scripted_tables,
    write_cassette,
)

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

PROJECT = "subjects/openai-agents"
CONFIGS = {"openai-agents-retry0": 0, "openai-agents-retry3": 3}
FAULTS = fault_blocks()  # the eight faults of specs/swe-lite-agents.toml


def cassette_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The scripted fix with a read-only status check after the submit (the SDK asks the model
    again after every tool result)."""

    def call(n: int, tool: str, **arguments: Any) -> list[dict[str, Any]]:
        return [{"id": f"call_afb_{n}", "name": tool, "arguments": arguments}]

    return fix_turns(task, call, check=True)


def subjects(spec_dir: Path) -> str:
    """The two `[[subjects]]` blocks, sharing one cassette folder written into the spec's folder."""
    folder = write_cassette(spec_dir, "openai-agents", cassette_turns)
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
{scripted_tables("openai-agents", folder)}""")
    return "".join(blocks)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("openai-agents")
    spec = make_spec(tmp, subjects(tmp / "spec"), FAULTS)  # make_spec's folder: tmp/spec
    # the subjects' state dirs are kept to read the SDK's own session (what it told its model)
    proc, run_dir = run_draft(spec, tmp / "out", "--keep-subject-dirs")
    kept = SUBJECT_ROOT / run_dir.name.rsplit("-", 1)[-1]
    try:
        assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
        yield run_dir
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def by_cell(run_dir: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each attempt's records by (subject id, fault id): one attempt per cell."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rs in attempts(run_dir):
        started = one(rs, "attempt_started")
        key = (started["subject_id"], started["fault_id"])
        assert key not in out
        out[key] = rs
    return out


def session_items(run_dir: Path, rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation the SDK persisted (its SQLiteSession in the kept state dir): the agent's
    own account of what it told its model, not evidence."""
    started = one(rs, "attempt_started")
    folder = SUBJECT_ROOT / run_dir.name.rsplit("-", 1)[-1]
    (state,) = folder.glob(f"{started['cell_id'].removeprefix('sha256:')[:16]}-a*")
    with contextlib.closing(sqlite3.connect(state / "session.sqlite3")) as db:
        rows = db.execute("SELECT message_data FROM agent_messages ORDER BY id").fetchall()
    return [json.loads(r[0]) for r in rows]


SDK_ERROR = "An error occurred while running the tool. Please try again."  # its default text


def told(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What each submit_patch and list_effects result in the conversation said, in order:
    committed (the destination's answer), ok, or the SDK's error text."""
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    out: dict[str, list[str]] = {"submit_patch": [], "list_effects": []}
    for i in items:
        name = names.get(i.get("call_id", ""))
        if i.get("type") != "function_call_output" or name not in out:
            continue
        text = json.dumps(i["output"])
        if SDK_ERROR in text:
            out[name].append("error")
        else:
            out[name].append("committed" if '\\"committed\\": true' in text else "ok")
    return out


BASELINE = {"model": 7, "exec": 4, "submit_patch": 1}
# fault -> (per-tool calls, (restart index, signaled) per launch, effects in the ledger, completed,
# what the submit's and the status check's results in the persisted conversation said), per
# config where they differ.
Expected = tuple[dict[str, int], list[tuple[int, bool]], int, bool, dict[str, list[str]]]
FINE = {"submit_patch": ["committed"], "list_effects": ["ok"]}
BROKEN = {"submit_patch": ["error"], "list_effects": ["error"]}
SAME: dict[str, Expected] = {
    # seven model turns, one per scripted turn (no side calls), four commands, one submit
    "none": (BASELINE, [(0, False)], 1, True, FINE),
    # Killed at the submit's effect. The relaunch resumes the session: the prompt and the four
    # finished turns (13 items); the turn that asked for the submit was in flight, so it was
    # never written, and the model is asked it again (5 + 3 model calls, no command again). The
    # script asks for the submit again: a second effect, and the first call left no trace in
    # the conversation.
    "sigkill-after-submit-effect": (
        {"model": 8, "exec": 4, "submit_patch": 2}, [(0, True), (1, False)], 2, True,
        FINE,
    ),
    # The stale-session error is the first command's result; the script goes on.
    "restart-during-first-exec": (BASELINE, [(0, False)], 1, True, FINE),
    # Stopped 5 s with the submit committed and its answer held: the same process continues,
    # its MCP client (no read timeout shorter than that) gets "committed"; nothing is repeated.
    "freeze-after-submit-effect": (BASELINE, [(0, False)], 1, True, FINE),
    # The openai client retries a model call that got no answer (max_retries = 2 by default).
    "lost-model-response": ({**BASELINE, "model": 8}, [(0, False)], 1, True, FINE),
    "partition-during-model-call": (
        {**BASELINE, "model": 8}, [(0, False)], 1, True, FINE,
    ),
    # Killed while its fourth model call is answered: resumed from the three finished turns
    # (10 items), the fourth asked again: 4 + 4 model calls, no command run twice.
    "sigkill-mid-model-call": (
        {**BASELINE, "model": 8}, [(0, True), (1, False)], 1, True, FINE,
    ),
}  # fmt: skip
EXPECTED: dict[str, dict[str, Expected]] = {
    "openai-agents-retry0": {
        **SAME,
        # No MCP retry: the model is told "An error occurred while running the tool. Please
        # try again." although the effect was committed. The SDK's one MCP session is broken
        # for good: the read-only check that follows fails the same way (it never reconnects).
        "lost-submit-response": (
            BASELINE, [(0, False)], 1, True, BROKEN,
        ),
        # The held submit is cut before it is forwarded and not retried: no effect at all.
        "partition-during-submit": (
            BASELINE, [(0, False)], 0, False, BROKEN,
        ),
    },
    "openai-agents-retry3": {
        **SAME,
        # The SDK's retry sends the submit again on a new MCP session, blindly: a second
        # effect, and the model is told only of the second ("committed").
        "lost-submit-response": (
            {**BASELINE, "submit_patch": 2}, [(0, False)], 2, True, FINE,
        ),
        # The retry after the cut call lands the submit once.
        "partition-during-submit": (
            {**BASELINE, "submit_patch": 2}, [(0, False)], 1, True, FINE,
        ),
    },
}  # fmt: skip


def test_every_fault_is_witnessed(run: Path) -> None:
    cells = by_cell(run)
    assert set(cells) == {(s, f) for s, faults in EXPECTED.items() for f in faults}
    for (sid, fault), rs in cells.items():
        check_witnessed(rs, fault, (sid, fault))


@pytest.mark.parametrize(
    ("sid", "fault"), [(s, f) for s, faults in sorted(EXPECTED.items()) for f in sorted(faults)]
)
def test_what_the_sdk_did(run: Path, sid: str, fault: str) -> None:
    *evidence, said = EXPECTED[sid][fault]
    rs = by_cell(run)[(sid, fault)]
    check_attempt(run, rs, *evidence)
    items = session_items(run, rs)
    assert told(items) == said
    # tracing off, nothing but the prompt as new input: one user message, the first item
    assert [i for i in items if i.get("role") == "user"] == items[:1]


def test_the_prompt_holds_no_part_of_the_answer(tmp_path: Path) -> None:
    """The agent builds its prompt from the agent view's keys only: given a task file that
    carries the known answer, no line of either patch nor a hidden test's name reaches the
    model; without a problem statement it names the task; with one, that is the prompt. Run in
    the subject's own built environment (its SDK imported as when it runs)."""
    from runner.runtime.subjects.config import UvEnvironment
    from runner.runtime.subjects.environment import ensure_built

    env = ensure_built(UvEnvironment(project=PROJECT, digest=tree_digest(ROOT / PROJECT)))
    full = oracle_task(load_task(ROOT / "specs" / "swe-lite" / TASK))
    bare = {"task_id": TASK, "src": full["src"]}
    stated = {**bare, "problem_statement": "cached() loses info"}
    prompts = []
    for n, task in enumerate((full, bare, stated)):
        path = tmp_path / f"task{n}.json"
        path.write_text(json.dumps(task))
        code = "import json, sys, agent; print(agent.prompt(json.load(open(sys.argv[1]))))"
        proc = subprocess.run(
            [str(env.python), "-c", code, str(path)],
            cwd=env.project, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        prompts.append(proc.stdout)
    answer = (full["gold_patch"] + full["tests_patch"]).splitlines() + list(full["fail_to_pass"])
    leaked = [line for line in answer if len(line.strip()) > 3 and line.strip() in prompts[0]]
    assert not leaked and full["src"] in prompts[0]
    assert TASK in prompts[1] and full["src"] in prompts[1]
    assert prompts[2].startswith("cached() loses info") and full["src"] in prompts[2]
