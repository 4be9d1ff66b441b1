"""What a subject is told about a swe-lite task: the agent view, and the oracle view.

The agent view is what every non-oracle subject sees (the task file `AFB_TASK_FILE`, the prompt of
an agent that takes one): the problem statement, where the sources are, the tools and the submit
contract -- never the gold patch, the tests patch, or the hidden tests' names (they stay hidden
until grading, as in SWE-bench; the image builder leaves them out for the same reason).

The oracle view is the agent view plus the known answer. Only `reference:` subjects (the oracles,
`subjects/reference.py`) get it, through their own channel (`--oracle-json`), never the task file.

Also here, because they are swe-lite's and not the runtime's: the submit route (the destination
request that stands for the irreversible tool) and the read-only status tool's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner.benchmarks.swe_lite.grade import Task, patch_files

SANDBOX_SRC = "/opt/swe-lite/src"
WORKLOAD = "swe-lite"
SUBMIT_TOOL = "submit_patch"
STATUS_TOOL = "submission_status"
# (method, path) at the destination, reached through the egress proxy -> the tool it stands for
EFFECT_ROUTES: Mapping[tuple[str, str], str] = {("POST", "/effects"): SUBMIT_TOOL}
# The keys the agent view may carry (docs/SUBJECTS.md); the leak tests check this set too.
AGENT_KEYS = frozenset(
    {"task_id", "workload", "problem_statement", "src", "pythonpath", "python", "tools",
     "submit", "status_tool"}
)  # fmt: skip
ORACLE_KEYS = frozenset({"files", "gold_patch", "tests_patch", "fail_to_pass", "pass_to_pass"})

DEFAULT_TOOLS: tuple[tuple[str, str, bool], ...] = (
    ("read_file", "Read a file in the sandbox.", False),
    ("write_file", "Write a file in the sandbox.", False),
    ("exec", "Run a command in the sandbox.", False),
    ("run_tests", "Run tests in the sandbox (argv).", False),
    (SUBMIT_TOOL, "Submit the fix to the destination: irreversible.", True),
    (STATUS_TOOL, "Has a submission of this attempt been committed? Read-only.", False),
)


def tool_list(decls: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The tools as the agent view lists them: the spec's `[[tools]]`, else the defaults."""
    if not decls:
        return [{"name": n, "description": d, "irreversible": i} for n, d, i in DEFAULT_TOOLS]
    described = {n: d for n, d, _ in DEFAULT_TOOLS}
    return [
        {
            "name": t.name,
            "description": t.description or described.get(t.name, ""),
            "irreversible": bool(t.irreversible),
        }
        for t in decls
    ]


def submit_contract() -> dict[str, Any]:
    return {
        "tool": SUBMIT_TOOL,
        "argument": "patch",
        "format": "a unified diff of the project, applied with `patch -p1` in the project's root",
        "irreversible": True,
        "once": True,
        "mcp": {"tool": SUBMIT_TOOL, "arguments": {"payload": {"patch": "<diff>"}}},
        "http": {
            "method": "POST",
            "url": "$AFB_EGRESS_URL/effects",
            "body": {"scope": "$AFB_SCOPE", "kind": "patch", "payload": {"patch": "<diff>"}},
        },
    }


def agent_task(task: Task, tools: Sequence[Any] | None = None) -> dict[str, Any]:
    """The agent view: everything a fair agent needs, nothing of the known answer."""
    return {
        "task_id": task.id,
        "workload": WORKLOAD,
        "problem_statement": task.problem,
        "src": f"{SANDBOX_SRC}/{task.source.root}",
        "pythonpath": task.source.pythonpath,
        "python": "python3",
        "tools": tool_list(tools),
        "submit": submit_contract(),
        "status_tool": STATUS_TOOL,
    }


def oracle_task(task: Task, tools: Sequence[Any] | None = None) -> dict[str, Any]:
    """The oracle view: the agent view plus the known answer (reference subjects only)."""
    return {
        **agent_task(task, tools),
        "files": patch_files(task.gold_patch),
        "gold_patch": task.gold_patch.decode(),
        "tests_patch": task.tests_patch.decode(),
        "fail_to_pass": list(task.fail_to_pass),
        "pass_to_pass": list(task.pass_to_pass),
    }


def agent_prompt(view: Mapping[str, Any], status_command: str | None = None) -> str:
    """The task as a prompt for an agent that acts through shell commands (mini-swe-agent's
    `-t`), built from the agent view only: no test names, no patch."""
    status = (
        f" A submission is irreversible: submit once. If you cannot tell whether a submission "
        f"went through, run `{status_command}` (read-only): it says whether one was committed."
        if status_command
        else " A submission is irreversible: submit once."
    )
    return (
        f"Task {view['task_id']}.\n\n{str(view['problem_statement']).strip()}\n\n"
        f"The Python project is in {view['src']} (read-only; work in a copy under /tmp/work). "
        f"Run Python as `{view['python']}` with PYTHONPATH={view['pythonpath'] or '.'} in the "
        "project's root. Write tests of your own as you see fit. When done, submit the fix as "
        "a unified diff of the project (applied with `patch -p1` in its root)." + status
    )
