"""The legacy scripted cassettes of the swe-lite tasks (`bench tasks cassettes --scripted`).

Per task (deterministic bytes), mini-swe-agent's (`cassettes/`) and the reference control's
(`control-cassettes/`), which swe-lite-agents 1.0.0 published and the subject tests serve
(tests/subjects/scripted-subjects.toml). Kept byte for byte as they were written (formerly
specs/swe-lite-agents/make_cassettes.py): the policy cassettes (cassettes.py) replace them for
new specs.

Each mini-swe-agent cassette is what a capable model would answer, turn by turn, with
mini-swe-agent's one tool (`bash`): look at the project, make a working copy and read the file
the issue is about, apply the fix, run the failing tests against a scratch copy carrying the
upstream test changes, then submit the diff with mini-swe-agent's own submit command. Two more
turns re-issue the submit: they are served only when the agent reports that the submit did not
go through (what a model told "submit failed" typically does), so the benchmark sees what that
leads to.

The control (reference:intent_reconcile with --plan-with-model) asks its model for the next step
before each of its steps; its cassette answers `next: <step>`, one turn per step
(runner/benchmarks/swe_lite/subjects/reference.py STEPS), so every model fault of the protocol
reaches it too.

A scripted cassette is served by conversation turn (the number of assistant messages in the
request), so a relaunched mini-swe-agent, which starts over, gets the same answers again.
"""

from __future__ import annotations

import json
import posixpath
import tomllib
from pathlib import Path
from typing import Any

from runner.benchmarks.swe_lite.agentview import oracle_task
from runner.benchmarks.swe_lite.grade import load_task
from runner.benchmarks.swe_lite.subjects.reference import STEPS

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
MINI_FOLDER, CONTROL_FOLDER = "cassettes", "control-cassettes"


def _heredoc(text: str) -> str:
    if "AFB_EOF" in text:
        raise ValueError("a patch holds the heredoc terminator AFB_EOF")
    return f"<<'AFB_EOF'\n{text.rstrip(chr(10))}\nAFB_EOF"


def turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """mini-swe-agent's scripted turns for one task (its oracle view: the model knows the fix)."""
    tid, src, first = task["task_id"], task["src"], task["files"][0]
    work = f"/tmp/work/{tid}"
    pp = task.get("pythonpath") or "."
    tests = " ".join(task["fail_to_pass"])
    submit = (
        f"cd {work} && echo {SUBMIT} && {{ diff -ruN --exclude=__pycache__ a b; test $? -le 1; }}"
    )

    def call(n: int, command: str) -> list[dict[str, Any]]:
        return [{"id": f"call_{tid[:24]}_{n}", "name": "bash", "arguments": {"command": command}}]

    return [
        {"text": "Let me look at the project layout first.",
         "tool_calls": call(0, f"ls {src} && ls {src}/{posixpath.dirname(first) or '.'}")},
        {"text": f"I'll make a working copy (a = pristine, b = mine) and read {first}.",
         "tool_calls": call(1, f"rm -rf {work} && mkdir -p {work} && cp -a {src} {work}/a && "
                               f"cp -a {src} {work}/b && head -n 150 {work}/b/{first}")},
        {"text": "I see the problem. Applying the fix.",
         "tool_calls": call(2, f"cd {work}/b && patch -p1 --forward --no-backup-if-mismatch "
                               f"{_heredoc(task['gold_patch'])}")},
        {"text": "Now the failing tests, in a scratch copy with the upstream test changes.",
         "tool_calls": call(3, f"cd {work} && rm -rf t && cp -a b t && cd t && patch -p1 -s "
                               f"--forward --no-backup-if-mismatch {_heredoc(task['tests_patch'])}"
                               f"\nPYTHONDONTWRITEBYTECODE=1 PYTHONPATH={pp} python3 -m pytest -q "
                               f"-p no:cacheprovider {tests}")},
        {"text": "The tests pass. Submitting the fix.", "tool_calls": call(4, submit)},
        {"text": "The submission did not go through. Submitting again.",
         "tool_calls": call(5, submit)},
        {"text": "Still no confirmation. One more time.", "tool_calls": call(6, submit)},
    ]  # fmt: skip


def control_turns() -> list[dict[str, Any]]:
    return [{"text": f"next: {step}"} for step in STEPS]


def _write(path: Path, turns: list[dict[str, Any]]) -> None:
    cassette = {"version": 1, "kind": "scripted", "model": "afb-scripted", "turns": turns}
    text = json.dumps(cassette, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


def write_scripted_cassettes(spec_path: Path, out: Path) -> list[Path]:
    """Write both folders' cassettes, one per task of the spec, under `out`; the paths written."""
    spec = tomllib.loads(spec_path.read_text(encoding="utf-8"))
    mini, control = out / MINI_FOLDER, out / CONTROL_FOLDER
    mini.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    written = []
    for ts in spec["task_sets"]:
        for t in ts["tasks"]:
            # the model is scripted with the known answer (the oracle view); the agent is not
            task = oracle_task(load_task(spec_path.parent / t["path"]))
            for path, script in ((mini / f"{t['id']}.json", turns(task)),
                                 (control / f"{t['id']}.json", control_turns())):  # fmt: skip
                _write(path, script)
                written.append(path)
    return written
