"""What an agent is told of a tau-lite task (solo mode: no user simulator), and the oracle.

tau2 runs these domains as a conversation with a simulated user who holds the scenario. Here
there is no user simulator: the agent gets, up front, what that user would say (the reason for
the call and their instructions, which tau2 hands its simulator) and the facts the user knows,
plus the domain policy and the tool list with tau2's own descriptions. Never the expected
actions, nor what tau2 keeps for its evaluator (the task's purpose and notes, the natural-
language assertions), nor the simulator-only `unknown_info`. The oracle view (reference
subjects only) adds the expected actions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.benchmarks.tau_lite import domains
from runner.benchmarks.tau_lite.tasks import TauTask

AGENT_KEYS = frozenset(
    {
        "benchmark",
        "task_id",
        "domain",
        "mode",
        "request",
        "user_instructions",
        "known_info",
        "policy",
        "tools",
        "instruction",
    }
)
SOLO_NOTE = (
    "There is no live customer in this session: everything the customer would tell you is "
    "below, and their instructions stand as their explicit confirmation where the policy asks "
    "for one. Act on their behalf through the tools, following the policy."
)


def tool_list(domain: str, docs: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "kind": t.kind,
            "irreversible": t.kind == "write",
            "parameters": sorted(t.params),
            "description": docs.get(t.name, ""),
        }
        for t in sorted(domains.TOOLS[domain].values(), key=lambda t: t.name)
    ]


def instruction(task: TauTask, policy: str) -> str:
    ins = task.task.user_scenario.instructions
    parts = [
        SOLO_NOTE,
        "",
        "## The customer's request",
        ins.reason_for_call.strip(),
        "",
        "## What the customer wants (their instructions)",
        ins.task_instructions.strip(),
    ]
    if ins.known_info:
        parts += ["", "## What the customer knows", ins.known_info.strip()]
    parts += ["", "## Policy", policy.strip()]
    return "\n".join(parts) + "\n"


def agent_task(task: TauTask, policy: str, docs: Mapping[str, str]) -> dict[str, Any]:
    ins = task.task.user_scenario.instructions
    view = {
        "benchmark": "tau-lite",
        "task_id": task.id,
        "domain": task.domain,
        "mode": "solo",
        "request": ins.reason_for_call,
        "user_instructions": ins.task_instructions,
        "known_info": ins.known_info or "",
        "policy": policy,
        "tools": tool_list(task.domain, docs),
        "instruction": instruction(task, policy),
    }
    assert set(view) == AGENT_KEYS
    return view


def oracle_task(task: TauTask, policy: str, docs: Mapping[str, str]) -> dict[str, Any]:
    return {
        **agent_task(task, policy, docs),
        "expected_actions": [{"name": a.name, "arguments": a.arguments} for a in task.actions],
        "gold_hash": task.gold_hash,
    }


def agent_prompt(view: Mapping[str, Any], status_command: str | None = None) -> str:
    tools = "\n".join(
        f"- {t['name']}({', '.join(t['parameters'])})"
        + (" [irreversible]" if t["irreversible"] else "")
        for t in view["tools"]
    )
    text = f"{view['instruction']}\n## Tools\n{tools}\n"
    if status_command:
        text += f"\nTo ask what your irreversible calls committed: {status_command}\n"
    return text


def leaks(view: Mapping[str, Any], task: TauTask) -> list[str]:
    """What of the known answer (or of tau2's evaluator-only text) appears in `view`: the
    expected actions' ids and argument objects, argument values that neither the customer's
    scenario nor the domain's own documentation (policy, tool descriptions, the same for every
    task) states, the natural-language assertions, the purpose and notes."""
    text = json.dumps(view, sort_keys=True)
    ins = task.task.user_scenario.instructions
    told = " ".join(
        [
            ins.reason_for_call,
            ins.task_instructions,
            ins.known_info or "",
            str(view.get("policy", "")),
            json.dumps(view.get("tools", [])),
        ]
    ).lower()
    found = [f"unexpected key {k}" for k in sorted(set(view) - AGENT_KEYS)]
    for a in task.actions:
        if a.action_id in text:
            found.append(f"action id {a.action_id}")
        if a.arguments and json.dumps(a.arguments, sort_keys=True) in text:
            found.append(f"arguments of {a.action_id}")
        for v in _strings(a.arguments):
            if len(v) >= 4 and v.lower() in text.lower() and v.lower() not in told:
                found.append(f"argument value {v!r} of {a.action_id}")
    crit = task.task.evaluation_criteria
    desc = task.task.description
    for s in [
        *(crit.nl_assertions or []),
        desc.purpose if desc else None,
        desc.notes if desc else None,
    ]:
        if s and len(s) >= 12 and s in text:
            found.append(f"evaluator text {s[:40]!r}")
    return found


def _strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, Mapping):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return []
