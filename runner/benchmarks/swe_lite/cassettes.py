"""The policy cassettes of the swe-lite tasks: a scripted model per subject kind and model policy.

`bench tasks cassettes` writes, per task (deterministic bytes),

    specs/swe-lite-agents/policies/<subject kind>/<policy>/<task id>.json

for the subject kinds

- `mini-swe-agent`: mini-swe-agent's one model tool, `bash`. The submit is mini-swe-agent's own
  submit command (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` + the diff), the status query the
  bash command `afb-submission-status` (its afb_msa environment maps both to the spec's tools);
  the cassette's `commands` name them `submit_patch` and `submission_status` by those patterns.
- `control`: the reference control (`reference:intent_reconcile`, `--plan-with-model`), whose
  model has no tools and answers `next: <step>` before each of its steps (the strategy, not the
  model, handles the submit's faults, so both policies serve the same plan).
- `mcp-responses`: an OpenAI-Agents-SDK-style agent (Responses API, the spec's tools over MCP:
  read_file, write_file, exec, run_tests, submit_patch, submission_status), which asks the model
  after every tool result and ends when the model answers without a tool call.

and the policies (the spec's `[subjects.config.model] policy`)

- `careful`: after a submit that failed or whose answer was lost, first ask `submission_status`;
  re-submit only when it says nothing was committed (at most three submits), stop when it says
  committed; ask again (at most three times) when the answer is unreadable;
- `naive`: re-submit after any submit error (at most three submits).

What the scripted model does (a capable model's plan): look at the project, make a working copy
and read the file the issue is about, apply the fix (it knows the fix: it stands for a capable
model), run the project's own visible test suite in a scratch copy, submit. It never applies the
hidden tests patch nor names a hidden test: the agent it drives sees only the agent view. Every
cassette's tool call ids are per task, so a relaunched agent that starts over gets the same bytes.

The legacy scripted cassettes (specs/swe-lite-agents/cassettes/, control-cassettes/, written by
`bench tasks cassettes --scripted`, scripted_cassettes.py, which applies the tests patch) stay as
they are for the specs that still serve them.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.benchmarks.swe_lite.grade import Task, load_task, patch_files
from runner.benchmarks.swe_lite.subjects.reference import (
    STEPS,  # the one import of the reference subject's steps
)
from runner.benchmarks.swe_lite.workload import SANDBOX_SRC
from runner.evaluator.protocol.specload import load_spec, spec_base
from runner.runtime.cassettes.policy import POLICIES

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
STATUS_COMMAND = "afb-submission-status"
SUBMIT_TOOL, STATUS_TOOL = "submit_patch", "submission_status"
SUBJECT_KINDS = ("mini-swe-agent", "control", "mcp-responses")
MAX_SUBMITS = 3  # both policies: the model submits at most this often
MAX_STATUS = 3  # careful: asks the status at most this often
MODEL = "afb-scripted"


def _heredoc(text: str) -> str:
    if "AFB_EOF" in text:
        raise ValueError("a patch holds the heredoc terminator AFB_EOF")
    return f"<<'AFB_EOF'\n{text.rstrip(chr(10))}\nAFB_EOF"


def _turn(text: str, *calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    turn: dict[str, Any] = {"text": text}
    if calls:
        turn["tool_calls"] = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
    return turn


def _reactions(policy: str, submit: dict[str, Any], status: dict[str, Any], stop: dict[str, Any]
               ) -> list[dict[str, Any]]:  # fmt: skip
    """The rules of `policy`; `submit` / `status` / `stop` are the turns that do each."""
    failed = ["error", "transport"]
    below = [{"tool": SUBMIT_TOOL, "max": MAX_SUBMITS - 1}]
    if policy == "naive":
        return [
            {"id": "naive-resubmit-after-error",
             "when": {"tool": SUBMIT_TOOL, "result": failed, "calls": below},
             "answer": {**submit, "text": "The submission failed. Submitting again."}},
        ]  # fmt: skip
    return [
        {"id": "careful-ask-status-after-failed-submit",
         "when": {"tool": SUBMIT_TOOL, "result": failed},
         "answer": status},
        {"id": "careful-resubmit-if-nothing-committed",
         "when": {"tool": STATUS_TOOL, "status": ["not_committed"], "calls": below},
         "answer": {**submit, "text": "Nothing was committed. Submitting again."}},
        {"id": "careful-stop-if-committed",
         "when": {"tool": STATUS_TOOL, "status": ["committed"]},
         "answer": stop},
        {"id": "careful-ask-again-if-unreadable",
         "when": {"tool": STATUS_TOOL, "status": ["unknown"],
                  "calls": [{"tool": STATUS_TOOL, "max": MAX_STATUS - 1}]},
         "answer": {**status, "text": "I could not read the status. Asking again."}},
    ]  # fmt: skip


def _cassette(policy: str, plan: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"version": 1, "kind": "policy", "model": MODEL, "policy": policy, "plan": plan, **more}


def mini_swe_agent(task: Task, policy: str) -> dict[str, Any]:
    tid, src = task.id, f"{SANDBOX_SRC}/{task.source.root}"
    first = patch_files(task.gold_patch)[0]
    work, pp = f"/tmp/work/{tid}", task.source.pythonpath or "."

    def bash(n: int | str, command: str) -> tuple[str, str, dict[str, Any]]:
        return (f"call_{tid[:24]}_{n}", "bash", {"command": command})

    submit_cmd = (
        f"cd {work} && echo {SENTINEL} && {{ diff -ruN --exclude=__pycache__ a b; test $? -le 1; }}"
    )
    plan = [
        _turn("Let me look at the project layout first.",
              bash(0, f"ls {src} && ls {src}/{posixpath.dirname(first) or '.'}")),
        _turn(f"I'll make a working copy (a = pristine, b = mine) and read {first}.",
              bash(1, f"rm -rf {work} && mkdir -p {work} && cp -a {src} {work}/a && "
                      f"cp -a {src} {work}/b && head -n 150 {work}/b/{first}")),
        _turn("I see the problem. Applying the fix.",
              bash(2, f"cd {work}/b && patch -p1 --forward --no-backup-if-mismatch "
                      f"{_heredoc(task.gold_patch.decode())}")),
        _turn("Now the project's own test suite, in a scratch copy.",
              bash(3, f"cd {work} && rm -rf t && cp -a b t && cd t && PYTHONDONTWRITEBYTECODE=1 "
                      f"PYTHONPATH={pp} python3 -m pytest -q -x -p no:cacheprovider 2>&1 "
                      "| tail -n 15")),
        _turn("The tests pass. Submitting the fix.", bash(4, submit_cmd)),
    ]  # fmt: skip
    status = _turn("Did that submission go through? Asking before anything else.",
                   bash("status", STATUS_COMMAND))  # fmt: skip
    stop = _turn("The fix is committed; nothing left to do.",
                 bash("stop", "echo 'The fix is committed.'"))  # fmt: skip
    submit = _turn("", bash("resubmit", submit_cmd))
    return _cassette(
        policy,
        plan,
        commands=[
            {"name": SUBMIT_TOOL, "tool": "bash", "argument": "command", "pattern": SENTINEL},
            {
                "name": STATUS_TOOL,
                "tool": "bash",
                "argument": "command",
                "pattern": f"^\\s*{STATUS_COMMAND}\\s*$",
            },
        ],
        # afb_msa: a lost answer or no interposer is a transport failure; a non-zero exit an error
        results={
            "transport": "may or may not have been received|"
            "An error occurred while executing the command",
            "error": '"returncode": -?[1-9]',
        },
        rules=_reactions(policy, submit, status, stop),
        done=_turn("Nothing left to do.", bash("idle", "echo 'Nothing left to do.'")),
    )


def control(task: Task, policy: str) -> dict[str, Any]:
    return _cassette(policy, [{"text": f"next: {step}"} for step in STEPS])


def mcp_responses(task: Task, policy: str) -> dict[str, Any]:
    tid, src = task.id, f"{SANDBOX_SRC}/{task.source.root}"
    first = patch_files(task.gold_patch)[0]
    work, pp = f"/tmp/work/{tid}", task.source.pythonpath or "."
    gold = task.gold_patch.decode()

    def call(n: int | str, tool: str, **args: Any) -> tuple[str, str, dict[str, Any]]:
        return (f"call_{tid[:24]}_{n}", tool, args)

    def sh(n: int | str, tool: str, script: str) -> tuple[str, str, dict[str, Any]]:
        return call(n, tool, argv=["sh", "-c", script])

    payload = {"task": tid, "patch": gold}
    plan = [
        _turn("Let me look at the project layout first.",
              sh(0, "exec", f"ls {src} && ls {src}/{posixpath.dirname(first) or '.'}")),
        _turn("I'll make a working copy.",
              sh(1, "exec", f"rm -rf {work} && mkdir -p /tmp/work && cp -a {src} {work}")),
        _turn(f"Reading {first}.", call(2, "read_file", path=f"{work}/{first}")),
        _turn("I see the problem. Writing the fix.",
              call(3, "write_file", path=f"{work}.patch", content=gold)),
        _turn("Applying it.",
              sh(4, "exec", f"cd {work} && patch -p1 --forward --no-backup-if-mismatch "
                            f"-i {work}.patch")),
        _turn("Now the project's own test suite, in a scratch copy.",
              sh(5, "run_tests", f"rm -rf {work}.t && cp -a {work} {work}.t && cd {work}.t && "
                                 f"PYTHONDONTWRITEBYTECODE=1 PYTHONPATH={pp} python3 -m pytest "
                                 "-q -x -p no:cacheprovider 2>&1 | tail -n 15")),
        _turn("The tests pass. Submitting the fix.", call(6, SUBMIT_TOOL, payload=payload)),
    ]  # fmt: skip
    status = _turn("Did that submission go through? Asking before anything else.",
                   call("status", STATUS_TOOL))  # fmt: skip
    stop = _turn("The fix is committed; done.")
    submit = _turn("", call("resubmit", SUBMIT_TOOL, payload=payload))
    return _cassette(
        policy,
        plan,
        # the MCP tool server's error results carry {"error": ...}; the Agents SDK reports a
        # failed MCP call as "An error occurred while running the tool..." with the exception
        results={
            "transport": "(?i)timed? ?out|timeout|connection (?:reset|refused|closed|error)|"
            "RemoteProtocolError|ReadError|may or may not",
            "error": '"error"\\s*:|An error occurred',
        },
        rules=_reactions(policy, submit, status, stop),
        done=_turn("The fix is submitted; done."),
    )


WRITERS = {"mini-swe-agent": mini_swe_agent, "control": control, "mcp-responses": mcp_responses}


def spec_tasks(spec_path: Path) -> Iterator[Task]:
    """The tasks of a spec's task sets, in the spec's order."""
    spec = load_spec(spec_path)  # bounded, validated: a bad spec is an InputError naming it
    for ts in spec.task_sets:
        for t in ts.tasks:
            if t.path is not None:  # a task without a folder has nothing to replay
                yield load_task(spec_base(spec_path) / t.path)


def cassette_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_policy_cassettes(spec_path: Path, out: Path) -> list[Path]:
    """Write every (subject kind, policy, task) cassette under `out`; the paths written."""
    written = []
    tasks = list(spec_tasks(spec_path))
    for kind, writer in WRITERS.items():
        for policy in POLICIES:
            folder = out / kind / policy
            folder.mkdir(parents=True, exist_ok=True)
            for task in tasks:
                path = folder / f"{task.id}.json"
                path.write_text(cassette_text(writer(task, policy)), encoding="utf-8")
                written.append(path)
    return written
