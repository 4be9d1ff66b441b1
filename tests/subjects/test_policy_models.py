"""Policy models as a controlled factor: the refusals (exit 2 before any cell runs, naming the
file and the rule), and mini-swe-agent under `careful` and `naive` in real attempts (one task,
baseline + a lost submit response)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.protocol.specload import load_spec
from runner.runtime.subjects.registry import resolve_subjects
from runner.runtime.subjects.tree import tree_digest
from tests.subjects.agents import ROOT, attempts, bench, fault_blocks, make_spec, subject_block

POLICIES = ROOT / "specs" / "swe-lite-agents" / "policies"
STATUS_TOOL = '[[tools]]\nname = "submission_status"\n\n'


def policy_spec(
    tmp: Path,
    policies: dict[str, str],
    *,
    faults: str = "",
    status_tool: bool = True,
    edit: Any = None,
) -> Path:
    """A draft spec of mini-swe-agent subjects, one per (subject id -> model policy), each
    serving the policy cassettes of that policy (copied beside the spec; `edit` rewrites the
    careful cassette of the task before the digests are taken)."""
    blocks = []
    for sid, policy in policies.items():
        b = subject_block("mini-swe-agent").replace('id = "mini-swe-agent"', f'id = "{sid}"')
        b = b.replace("step_limit = 7", "step_limit = 14")
        b = re.sub(r'cassettes = "swe-lite-agents/cassettes"\ndigest = "sha256:[0-9a-f]{64}"',
                   f'cassettes = "swe-lite-agents/policies/mini-swe-agent/{policy}"\n'
                   f'digest = "@{policy}@"\npolicy = "{policy}"', b)  # fmt: skip
        blocks.append(b)
    spec = make_spec(tmp, "\n".join(blocks), faults)
    target = spec.parent / "swe-lite-agents" / "policies" / "mini-swe-agent"
    text = spec.read_text()
    for policy in set(policies.values()):
        folder = target / policy
        folder.mkdir(parents=True, exist_ok=True)
        for task_file in (spec.parent / "swe-lite").iterdir():
            src = POLICIES / "mini-swe-agent" / policy / f"{task_file.name}.json"
            if src.is_file():
                shutil.copy(src, folder / src.name)
        if edit is not None and policy == "careful":
            (path,) = folder.glob("*.json")
            path.write_text(json.dumps(edit(json.loads(path.read_text()))))
        text = text.replace(f"@{policy}@", tree_digest(folder))
    declared = 'name = "submission_status"' in text  # swe-lite-agents.toml may declare it
    if status_tool and not declared:
        text = text.replace("[[task_sets]]", STATUS_TOOL + "[[task_sets]]", 1)
    elif declared and not status_tool:
        text = re.sub(r'\[\[tools\]\]\nname = "submission_status"\n(description = .*\n)?', "", text)
    spec.write_text(text)
    return spec


def _run(spec: Path, tmp: Path) -> tuple[int, str]:
    out = tmp / "out"
    proc = bench("run", str(spec), "--draft", "--out", str(out), timeout=600)
    assert not out.exists() or not any(out.iterdir()), "nothing may be written"
    return proc.returncode, proc.stdout + proc.stderr


def test_a_spec_declaring_careful_resolves(tmp_path: Path) -> None:
    spec = policy_spec(tmp_path, {"msa-careful": "careful", "msa-naive": "naive"})
    launches = resolve_subjects(load_spec(spec), spec)
    assert set(launches) == {"msa-careful", "msa-naive"}


def _with(rule_edit: Any) -> Any:
    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        rule_edit(doc)
        return doc

    return edit


def test_an_unknown_predicate_is_exit_2_naming_the_file_and_rule(tmp_path: Path) -> None:
    edit = _with(lambda d: d["rules"][0]["when"].update(last_tool="bash"))
    spec = policy_spec(tmp_path, {"m": "careful"}, edit=edit)
    rc, out = _run(spec, tmp_path)
    assert rc == 2 and "unknown predicate 'last_tool'" in out, out
    assert "careful-ask-status-after-failed-submit" in out and ".json" in out


def test_two_rules_matching_one_request_are_exit_2(tmp_path: Path) -> None:
    def overlap(d: dict[str, Any]) -> None:
        when = {"tool": "submission_status", "status": ["committed"]}
        d["rules"].append({"id": "also-stop", "answer": {"text": "x"}, "when": when})

    rc, out = _run(policy_spec(tmp_path, {"m": "careful"}, edit=_with(overlap)), tmp_path)
    assert rc == 2 and "'careful-stop-if-committed' and 'also-stop'" in out, out


def test_a_rule_naming_an_undeclared_tool_is_exit_2(tmp_path: Path) -> None:
    # the spec does not declare submission_status: the command standing for it is refused
    rc, out = _run(policy_spec(tmp_path, {"m": "careful"}, status_tool=False), tmp_path)
    assert rc == 2 and "commands[1].name" in out and "submission_status" in out, out
    edit = _with(lambda d: d["rules"][2]["when"].update(tool="submit"))
    rc, out = _run(policy_spec(tmp_path / "b", {"m": "careful"}, edit=edit), tmp_path / "b")
    assert rc == 2 and "rules[2].when.tool" in out and "'submit'" in out, out


def test_the_declared_policy_must_be_the_cassettes(tmp_path: Path) -> None:
    spec = policy_spec(tmp_path, {"m": "careful"})
    spec.write_text(spec.read_text().replace('policy = "careful"', 'policy = "naive"'))
    rc, out = _run(spec, tmp_path)
    assert rc == 2 and "declares policy 'careful'" in out and "'naive'" in out, out
    # a policy on a scripted (turn-numbered) cassette: refused too
    spec = make_spec(tmp_path / "s", subject_block("mini-swe-agent").replace(
        'mode = "scripted"', 'mode = "scripted"\npolicy = "naive"'))  # fmt: skip
    rc, out = _run(spec, tmp_path / "s")
    assert rc == 2 and "served by a policy cassette" in out, out


# ------------------------------------------------------------------------------ real attempts


@pytest.mark.runtime
@pytest.mark.slow
def test_careful_asks_and_does_not_duplicate_naive_resubmits(tmp_path: Path) -> None:
    """A lost submit response: naive submits again (two effects); careful asks the status first
    and does not duplicate (one effect). Where afb_msa maps `afb-submission-status` to the
    status tool (branch agentview) the answer is `committed` and careful stops (checked with
    that branch merged: one submission_status call, one effect); without it the command fails
    in the sandbox, the status is `unknown`, and careful, not told that nothing was committed,
    still does not re-submit."""
    spec = policy_spec(tmp_path, {"msa-careful": "careful", "msa-naive": "naive"},
                       faults=fault_blocks("lost-submit-response"))  # fmt: skip
    out = tmp_path / "out"
    proc = bench("run", str(spec), "--draft", "--out", str(out), "--jobs", "1",
                 "--keep-subject-dirs", timeout=1500)  # fmt: skip
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    seen: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}
    for rs in attempts(run_dir):
        (start,) = [r for r in rs if r["type"] == "attempt_started"]
        grades = [r for r in rs if r["type"] == "grader_result"]
        (counts,) = [r for r in rs if r["type"] == "tool_calls"]
        committed = grades[0]["committed_effects"] if grades else -1
        seen[(start["subject_id"], start["fault_id"])] = (committed, dict(counts["by_tool"]))
    assert seen[("msa-careful", "none")][0] == 1 and seen[("msa-naive", "none")][0] == 1, seen
    assert seen[("msa-naive", "lost-submit-response")][0] == 2, seen
    assert seen[("msa-careful", "lost-submit-response")][0] == 1, seen
    # careful asked: its status query reached the sandbox side (the tool submission_status
    # where the agent maps it, else an exec of the command) after the lost submit
    careful_tools = seen[("msa-careful", "lost-submit-response")][1]
    baseline_tools = seen[("msa-careful", "none")][1]
    asked = careful_tools.get("submission_status", 0) + careful_tools.get("exec", 0)
    assert asked > baseline_tools.get("exec", 0), (careful_tools, baseline_tools)
    if "submission_status" in careful_tools:  # the real status tool: asked once, then stopped
        assert careful_tools["submission_status"] == 1, careful_tools
    print(json.dumps({f"{k[0]}/{k[1]}": v for k, v in sorted(seen.items())}, indent=1))


@pytest.mark.runtime
@pytest.mark.slow
def test_the_control_plans_with_its_policy_cassette_under_model_faults(tmp_path: Path) -> None:
    """reference:intent_reconcile --plan-with-model under the `control` policy cassettes: the
    plan position is read from its conversation, so a retried (lost, partitioned) model call
    gets the same answer and every cell completes with one effect."""
    block = subject_block("intent-reconcile")
    old = r'cassettes = "swe-lite-agents/control-cassettes"\ndigest = "sha256:[0-9a-f]{64}"'
    new = (
        'cassettes = "swe-lite-agents/policies/control/careful"\ndigest = "@d@"\npolicy = "careful"'
    )
    block = re.sub(old, new, block)
    spec = make_spec(
        tmp_path, block, fault_blocks("lost-model-response", "partition-during-model-call")
    )
    folder = spec.parent / "swe-lite-agents" / "policies" / "control" / "careful"
    folder.mkdir(parents=True)
    for task_dir in (spec.parent / "swe-lite").iterdir():
        src = POLICIES / "control" / "careful" / f"{task_dir.name}.json"
        if src.is_file():
            shutil.copy(src, folder / src.name)
    spec.write_text(spec.read_text().replace("@d@", tree_digest(folder)))
    out = tmp_path / "out"
    proc = bench("run", str(spec), "--draft", "--out", str(out), "--jobs", "1", timeout=900)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    seen = {}
    for rs in attempts(run_dir):
        (start,) = [r for r in rs if r["type"] == "attempt_started"]
        (end,) = [r for r in rs if r["type"] == "attempt_ended"]
        grades = [r for r in rs if r["type"] == "grader_result"]
        (counts,) = [r for r in rs if r["type"] == "tool_calls"]
        states = {r["state"] for r in rs if r["type"] == "lifecycle"}
        if start["fault_id"] != "none":
            assert "witnessed" in states, (start["fault_id"], states)
        assert counts["by_tool"].get("model", 0) >= 9
        seen[start["fault_id"]] = (end["outcome"], grades[0]["committed_effects"])
    assert seen == {
        f: ("subject_finished", 1)
        for f in ("none", "lost-model-response", "partition-during-model-call")
    }, seen
