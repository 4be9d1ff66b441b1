"""The swe-lite policy cassettes (`bench tasks cassettes`): committed bytes are what the module
writes, each passes the checks for its subject kind, none leaks a hidden test, and a model
answering through one walks the plan and reacts as its policy says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.benchmarks.swe_lite.cassettes import SUBJECT_KINDS, spec_tasks
from runner.cli.main import app
from runner.evaluator.core.inputs import project_root
from runner.runtime.cassettes.load import load_cassette
from runner.runtime.cassettes.policy import POLICIES, Policy, PolicyCassette, check_policy
from runner.runtime.subjects.mini_swe_agent import MINI_SWE_AGENT_MODEL_TOOLS

ROOT = project_root()
SPEC = ROOT / "specs" / "swe-lite.toml"
COMMITTED = ROOT / "specs" / "swe-lite-agents" / "policies"
SPEC_TOOLS = frozenset(
    {"read_file", "write_file", "exec", "run_tests", "submit_patch", "submission_status"}
)
MODEL_TOOLS = {"mini-swe-agent": MINI_SWE_AGENT_MODEL_TOOLS, "control": frozenset(),
               "mcp-responses": SPEC_TOOLS}  # fmt: skip


def test_the_committed_cassettes_are_what_bench_tasks_cassettes_writes(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["tasks", "cassettes", "--spec", str(SPEC), "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    assert fresh == sorted(p.relative_to(COMMITTED) for p in COMMITTED.rglob("*.json"))
    assert len(fresh) == len(SUBJECT_KINDS) * len(POLICIES) * 8
    for rel in fresh:
        assert (tmp_path / rel).read_bytes() == (COMMITTED / rel).read_bytes(), rel
    assert res.output.count("sha256:") == len(SUBJECT_KINDS) * len(POLICIES)


@pytest.mark.parametrize("kind", SUBJECT_KINDS)
def test_each_passes_the_checks_of_its_subject_kind(kind: str) -> None:
    for policy in POLICIES:
        for path in sorted((COMMITTED / kind / policy).glob("*.json")):
            c = load_cassette(path)
            assert isinstance(c, PolicyCassette) and c.policy == policy
            check_policy(c, source=str(path), model_tools=MODEL_TOOLS[kind],
                         spec_tools=SPEC_TOOLS, declared=policy)  # fmt: skip


def test_no_cassette_applies_the_tests_patch_or_names_a_hidden_test() -> None:
    tasks = list(spec_tasks(SPEC))
    hidden: list[str] = []
    for t in tasks:
        hidden += [*t.fail_to_pass, *t.pass_to_pass]
        added = [ln[1:].strip() for ln in t.tests_patch.decode().splitlines()
                 if ln.startswith("+") and not ln.startswith("+++")]  # fmt: skip
        hidden += [ln for ln in added if len(ln) > 30]  # distinctive test lines
        hidden += [ln.split()[-1] for ln in t.tests_patch.decode().splitlines()
                   if ln.startswith("+++ ")]  # fmt: skip
    for path in COMMITTED.rglob("*.json"):
        text = json.loads(path.read_text())  # compare decoded strings, not JSON escapes
        flat = json.dumps(text, ensure_ascii=False)
        decoded = " ".join(_strings(text))
        for h in hidden:
            assert h not in decoded and h not in flat, (path, h)


def _strings(doc: object) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return []


def _chat(history: list[tuple[str, str, str]]) -> dict[str, object]:
    msgs: list[dict[str, object]] = [{"role": "user", "content": "task"}]
    for cid, cmd, out in history:
        fn = {"name": "bash", "arguments": json.dumps({"command": cmd})}
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [{"id": cid, "type": "function", "function": fn}]})  # fmt: skip
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
    return {"model": "m", "messages": msgs}


def test_mini_swe_agent_careful_and_naive_walk_the_plan_and_part_after_a_lost_submit() -> None:
    tid = "idna-encode-invalid-bytes"
    ok = json.dumps({"returncode": 0, "output": "fine"})
    why = "submit failed, it may or may not have been received: timed out"
    lost = json.dumps({"returncode": -1, "output": "COMPLETE...", "exception_info": why})
    # afb_msa's status observation: the tool's JSON answer as output (no exit code: -1)
    said = json.dumps({"returncode": -1, "output": json.dumps({"committed": False, "effects": 0})})
    walked: dict[str, list[str]] = {}
    for policy in POLICIES:
        c = load_cassette(COMMITTED / "mini-swe-agent" / policy / f"{tid}.json")
        assert isinstance(c, PolicyCassette)
        p = Policy(c)
        history: list[tuple[str, str, str]] = []
        sources = []
        for _ in range(5):
            sel = p.select("openai-chat", _chat(history))
            assert sel.answer is not None
            sources.append(sel.source)
            c = sel.answer.tool_calls[0]
            history.append(
                (
                    c.id,
                    c.arguments["command"],
                    lost if "COMPLETE_TASK" in c.arguments["command"] else ok,
                )
            )
        sel = p.select("openai-chat", _chat(history))
        sources.append(sel.source)
        if sel.source == "rule:careful-ask-status-after-failed-submit":
            assert (
                sel.answer is not None
                and sel.answer.tool_calls[0].arguments["command"] == "afb-submission-status"
            )
            history.append((sel.answer.tool_calls[0].id, "afb-submission-status", said))
            sources.append(p.select("openai-chat", _chat(history)).source)
        walked[policy] = sources
    plan = [f"plan:{i}" for i in range(5)]
    assert walked["naive"] == [*plan, "rule:naive-resubmit-after-error"]
    assert walked["careful"] == [
        *plan,
        "rule:careful-ask-status-after-failed-submit",
        "rule:careful-resubmit-if-nothing-committed",
    ]


def test_the_control_plans_every_step_of_the_reference_subject_and_resumes() -> None:
    from runner.benchmarks.swe_lite.subjects.reference import STEPS

    c = load_cassette(COMMITTED / "control" / "careful" / "idna-encode-invalid-bytes.json")
    assert isinstance(c, PolicyCassette)
    p = Policy(c)

    def ask(done: list[str]) -> str:  # the conversation reference.py's plan() sends
        msgs = [{"role": "system", "content": "plan"}, {"role": "user", "content": "first?"}]
        for d in done:
            msgs += [{"role": "assistant", "content": f"next: {d}"},
                     {"role": "user", "content": f"done: {d}. Which step comes next?"}]  # fmt: skip
        sel = p.select("openai-chat", {"model": "afb-scripted", "messages": msgs})
        return sel.answer.text if sel.answer is not None else sel.source

    assert [ask(list(STEPS[:i])) for i in range(len(STEPS))] == [f"next: {s}" for s in STEPS]
    assert ask(list(STEPS)) == "divergence"


def test_the_mcp_responses_agent_walks_its_tools_and_reacts_by_policy() -> None:
    tid = "toolz-tlz-python311"
    lost = "An error occurred while running the tool. Please try again. Error: Timed out"
    walked: dict[str, list[str]] = {}
    for policy in POLICIES:
        c = load_cassette(COMMITTED / "mcp-responses" / policy / f"{tid}.json")
        assert isinstance(c, PolicyCassette)
        p = Policy(c)
        items: list[dict[str, object]] = [{"role": "user", "content": "task"}]
        names = []
        for _ in range(12):
            sel = p.select("openai-responses", {"model": "m", "input": items})
            if sel.answer is None or not sel.answer.tool_calls:
                names.append("final" if sel.answer is not None else sel.source)
                break
            call = sel.answer.tool_calls[0]
            names.append(call.name)
            items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                          "arguments": json.dumps(call.arguments)})  # fmt: skip
            n_submits = names.count("submit_patch")
            if call.name == "submit_patch":
                out = lost if n_submits == 1 else json.dumps({"effect_id": "e2"})
            elif call.name == "submission_status":
                out = json.dumps({"scope": "s", "committed": False, "effects": 0})
            else:
                out = json.dumps({"exit_code": 0, "stdout": "ok"})
            items.append({"type": "function_call_output", "call_id": call.id, "output": out})
        walked[policy] = names
    plan = ["exec", "exec", "read_file", "write_file", "exec", "run_tests", "submit_patch"]
    assert walked["naive"] == [*plan, "submit_patch", "final"]
    assert walked["careful"] == [*plan, "submission_status", "submit_patch", "final"]
