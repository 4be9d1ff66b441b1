"""The tasks come from the pinned wheel, replay on the pristine DB, and match tau2's numbers."""

from __future__ import annotations

from typing import Any

from runner.benchmarks.tau_lite import domains, tasks
from runner.benchmarks.tau_lite.store import Store


def test_enough_write_tasks_per_domain(sets: dict[str, tasks.DomainSet]) -> None:
    for domain, s in sets.items():
        assert len(s.tasks) >= 20, domain
        for t in s.tasks.values():
            assert t.writes, t.id
            assert sum(t.expected_intents.values()) >= 1, t.id  # a write that changes state


def test_pristine_hash_is_tau2s(
    sets: dict[str, tasks.DomainSet], reference: dict[str, Any]
) -> None:
    for domain, s in sets.items():
        assert s.pristine_hash == reference["domains"][domain]["pristine"]


def test_every_kept_task_reaches_tau2s_gold_state(
    sets: dict[str, tasks.DomainSet], reference: dict[str, Any]
) -> None:
    """tau2's own gold run (generated with the real tau2) and the port's replay agree on the
    final DB hash of every kept task: the port is faithful where the tasks exercise it."""
    for domain, s in sets.items():
        ref = reference["domains"][domain]["tasks"]
        for t in s.tasks.values():
            assert t.gold_hash == ref[t.task.id]["gold"], t.id
            assert t.gold_hash != s.pristine_hash, t.id


def test_replay_errors_are_tau2s(
    sets: dict[str, tasks.DomainSet], reference: dict[str, Any], fresh
) -> None:
    """The same expected calls fail, with the same messages, as in tau2's gold run."""
    for domain, s in sets.items():
        for t in list(s.tasks.values())[:: max(1, len(s.tasks) // 15)]:
            store: Store = fresh(domain)
            errors = []
            for i, a in enumerate(t.actions):
                o = domains.call(store, a.name, a.arguments, scope="replay")
                if not o.ok:
                    errors.append({"index": i, "name": a.name, "error": o.error})
            assert errors == reference["domains"][domain]["tasks"][t.task.id]["errors"], t.id
            assert store.state_hash() == t.gold_hash


def test_refused_gold_writes_are_excluded_and_named(sets: dict[str, tasks.DomainSet]) -> None:
    ex = sets["retail"].excluded
    assert "retail-12" not in sets["retail"].tasks
    assert ex["retail-12"].startswith("expected write 12_4 return_delivered_order_items refused")
    assert "original payment method" in ex["retail-12"]
    assert ex["retail-105"].endswith(
        "Insufficient gift card balance to pay for the price difference"
    )
    assert all(r == "no write action" for k, r in sets["airline"].excluded.items()), sets[
        "airline"
    ].excluded


def test_airports_and_tool_docs_come_from_the_wheel(wheel_path) -> None:
    ports = tasks.airports(wheel_path)
    assert {"iata": "SFO", "city": "San Francisco"} in ports and len(ports) == 20
    docs = tasks.tool_docs(wheel_path, "airline")
    assert set(docs) == set(domains.TOOLS["airline"])
    assert docs["send_certificate"].startswith("Send a certificate to a user. Be careful!")
