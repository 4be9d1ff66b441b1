"""The store: WAL, one transaction for state + ledger, refusals journaled, the ledger a
faithful journal of the state."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.benchmarks.tau_lite import domains, tasks
from runner.benchmarks.tau_lite.store import DomainError, Store, StoreError

REPO = Path(__file__).resolve().parents[2]
CERT = {"user_id": "mia_li_3668", "amount": 150}

CHILD = """
import os, signal, sys
from pathlib import Path
from runner.benchmarks.tau_lite import domains
from runner.benchmarks.tau_lite.store import Store

stage = sys.argv[2]
def hook(name):
    if name == stage:
        os.kill(os.getpid(), signal.SIGKILL)
store = Store(Path(sys.argv[1]), hook=hook)
out = domains.call(store, "send_certificate", {"user_id": "mia_li_3668", "amount": 150},
                   scope="s")
print(out.effect_id)
"""


def test_the_store_is_in_wal_mode(fresh) -> None:
    store = fresh("airline")
    (mode,) = store._conn.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


@pytest.mark.parametrize("stage", ["state_written", "ledger_written"])
def test_sigkill_inside_the_transaction_leaves_neither(fresh, stage: str) -> None:
    """Killed after the rows (or the rows and the ledger row) are written but before COMMIT:
    the reopened store has neither the certificate nor its ledger row."""
    store = fresh("airline")
    before = store.state_hash()
    store.close()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(store.path), stage],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    reopened = Store(store.path)
    try:
        assert reopened.ledger() == []
        assert reopened.state_hash() == before
    finally:
        reopened.close()


def test_a_commit_survives_a_sigkill_after_it(fresh) -> None:
    store = fresh("airline")
    before = store.state_hash()
    store.close()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD + "os.kill(os.getpid(), signal.SIGKILL)\n",
            str(store.path),
            "never",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL and proc.stdout.strip() == "eff-00000001"
    reopened = Store(store.path)
    try:
        [row] = reopened.ledger()
        assert (
            row["outcome"] == "committed" and row["changed"] and row["tool"] == "send_certificate"
        )
        assert reopened.state_hash() != before
        user = reopened.read(lambda tx: tx.get("users", "mia_li_3668"), {})
        assert user["payment_methods"]["certificate_3221322"]["amount"] == 150.0
    finally:
        reopened.close()


def test_a_refusal_is_journaled_and_changes_nothing(fresh) -> None:
    store = fresh("retail")
    before = store.state_hash()
    out = domains.call(
        store, "cancel_pending_order", {"order_id": "#W0000000", "reason": "x"}, scope="s"
    )
    assert not out.ok and out.error == "Order not found"
    [row] = store.ledger("s")
    assert row["outcome"] == "rejected" and row["error"] == "Order not found" and not row["changed"]
    assert store.state_hash() == before


def test_misfit_arguments_are_the_agents_error(fresh) -> None:
    store = fresh("airline")
    bad = domains.call(
        store,
        "update_reservation_baggages",
        {
            "reservation_id": "4WQ150",
            "total_baggages": "2",
            "nonfree_baggages": 0,
            "payment_id": "x",
        },
        scope="s",
    )
    assert not bad.ok and "total_baggages: expected an integer" in (bad.error or "")
    missing = domains.call(store, "send_certificate", {"user_id": "mia_li_3668"}, scope="s")
    assert not missing.ok and "missing arguments ['amount']" in (missing.error or "")
    unknown = domains.call(store, "no_such_tool", {}, scope="s")
    assert not unknown.ok and unknown.effect_id is None
    assert [r["outcome"] for r in store.ledger("s")] == ["rejected", "rejected"]


def test_a_harness_bug_rolls_back_and_journals_nothing(fresh) -> None:
    store = fresh("airline")
    before = store.state_hash()

    def buggy(tx: Any) -> None:
        tx.get("users", "mia_li_3668")["email"] = "changed@example.com"
        tx.flush()
        raise KeyError("a bug, not a domain rule")

    with pytest.raises(KeyError):
        store.write("send_certificate", buggy, {}, scope="s")
    assert store.ledger() == [] and store.state_hash() == before


def test_reads_change_nothing_and_journal_nothing(fresh) -> None:
    store = fresh("airline")
    before = store.state_hash()
    out = domains.call(
        store,
        "search_direct_flight",
        {"origin": "JFK", "destination": "SFO", "date": "2024-05-20"},
        scope="s",
    )
    assert out.ok and isinstance(out.result, list)
    assert all(f["origin"] == "JFK" and f["status"] == "available" for f in out.result)
    assert store.ledger() == [] and store.state_hash() == before


def test_a_non_store_is_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StoreError, match=r"junk\.db"):
        Store(junk)
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "absent.db")


def _pool(sets: dict[str, tasks.DomainSet], domain: str) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for t in list(sets[domain].tasks.values())[:12]:
        calls += [(a.name, a.arguments) for a in t.actions]
    calls += [("send_certificate", CERT), ("cancel_reservation", {"reservation_id": "NOPE"})]
    return calls


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_ledger_replays_to_the_state(sets, data) -> None:
    """Invariant: replaying the ledger's committed calls, in order, on the pristine DB gives
    exactly the final state; every refused call left the state as it was."""
    domain = data.draw(st.sampled_from(["airline", "retail"]))
    pool = _pool(sets, domain)
    calls = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=12))
    with tempfile.TemporaryDirectory() as tmp:
        src = Store(sets[domain].pristine)
        store, replay = src.copy_to(Path(tmp) / "a.db"), src.copy_to(Path(tmp) / "b.db")
        src.close()
        try:
            for name, args in calls:
                before = store.state_hash()
                out = domains.call(store, name, args, scope="s")
                if not out.ok:
                    assert store.state_hash() == before
            for row in store.ledger("s"):
                if row["outcome"] == "committed":
                    assert domains.call(replay, row["tool"], row["arguments"], scope="r").ok
            assert replay.state_hash() == store.state_hash()
        finally:
            store.close()
            replay.close()


def test_domain_error_is_a_value_error() -> None:
    assert issubclass(DomainError, ValueError)
