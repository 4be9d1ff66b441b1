"""The agent view holds the customer's request, what they know and the policy: never the
expected actions (the oracle view has them, and the leak checker sees them there)."""

from __future__ import annotations

from pathlib import Path

from runner.benchmarks.tau_lite import agentview, tasks


def test_no_expected_action_or_argument_leaks_into_any_agent_view(sets, wheel_path: Path) -> None:
    checked = 0
    for domain, s in sets.items():
        docs = tasks.tool_docs(wheel_path, domain)
        for t in s.tasks.values():
            view = agentview.agent_task(t, s.policy, docs)
            assert set(view) == agentview.AGENT_KEYS
            assert agentview.leaks(view, t) == [], t.id
            assert "expected_actions" not in agentview.agent_prompt(view)
            checked += 1
    assert checked == sum(len(s.tasks) for s in sets.values()) >= 40


def test_the_checker_sees_a_planted_leak(sets, wheel_path: Path) -> None:
    s = sets["airline"]
    t = s.tasks["airline-8"]
    docs = tasks.tool_docs(wheel_path, "airline")
    oracle = agentview.oracle_task(t, s.policy, docs)
    found = agentview.leaks(oracle, t)
    assert "unexpected key expected_actions" in found and "arguments of 8_3" in found
    # a reservation id the agent must look up (WUNA5K), slipped into the instruction
    planted = dict(agentview.agent_task(t, s.policy, docs))
    planted["instruction"] += "\nYour May 10 reservation is WUNA5K."
    assert "argument value 'WUNA5K' of 8_1" in agentview.leaks(planted, t)
    # tau2's evaluator-only text
    planted = dict(agentview.agent_task(t, s.policy, docs))
    planted["request"] += " " + (t.task.evaluation_criteria.nl_assertions or [""])[0]
    assert any(x.startswith("evaluator text") for x in agentview.leaks(planted, t))


def test_the_view_tells_what_the_customer_says_and_the_policy(sets, wheel_path: Path) -> None:
    s = sets["airline"]
    t = s.tasks["airline-8"]
    view = agentview.agent_task(t, s.policy, tasks.tool_docs(wheel_path, "airline"))
    text = view["instruction"]
    assert "one-way flight from ORD to PHL on May 26" in text
    assert "sophia_silva_7557" in text and "# Airline Agent Policy" in text
    assert "no live customer" in text and view["mode"] == "solo"
    assert "You do not know the flight number" not in text  # unknown_info: simulator-only
    irreversible = {x["name"] for x in view["tools"] if x["irreversible"]}
    assert irreversible == {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
