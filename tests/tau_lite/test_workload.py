"""The Workload's side of a cell, in-process: the attempt's destination, an oracle run of the
expected actions over HTTP, and the grader reading only the ledger (as an attempt grades)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.tau_lite import domains, tasks, wheel
from runner.benchmarks.tau_lite.workload import TauLiteWorkload
from runner.runtime.attempt.api import GradeContext, GradeOutcome
from runner.runtime.attempt.grading import make_read_ledger
from runner.runtime.workload import Workload

SCOPE = "run-1/attempt-1"


@pytest.fixture(scope="module")
def workload(sets: dict[str, tasks.DomainSet], wheel_path: Path) -> TauLiteWorkload:
    docs = {d: tasks.tool_docs(wheel_path, d) for d in wheel.DOMAINS}
    return TauLiteWorkload(sets, docs, image="swe-lite")


def _post(addr: tuple[str, int], path: str, body: Any) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(*addr, timeout=30)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _cell(
    workload: TauLiteWorkload, task_id: str, tmp_path: Path, repeat_writes: int = 1
) -> GradeOutcome:
    """One cell: the oracle's calls (each write sent `repeat_writes` times, as a blind retry
    after a lost response would), then the grade an attempt would record."""
    oracle = workload.oracle_task(task_id)
    writes = set(workload.effect_routes.values())
    with workload.destination(task_id, tmp_path / f"{task_id}.db") as dest:
        for a in oracle["expected_actions"]:
            if a["name"] in writes:
                for _ in range(repeat_writes):
                    _post(
                        dest.address,
                        f"/effects/{a['name']}",
                        {"scope": SCOPE, "payload": a["arguments"]},
                    )
            else:
                _post(dest.address, f"/tools/{a['name']}", {"arguments": a["arguments"]})
        ctx = GradeContext(SCOPE, make_read_ledger(dest.address), fresh_sandbox=None, tool_calls={})  # type: ignore[arg-type]
        return workload.grader(task_id)(ctx)


def test_it_is_a_workload(workload: TauLiteWorkload) -> None:
    w: Workload = workload
    assert w.image == "swe-lite" and w.oracle_subject is not None
    assert w.oracle_subject.name == "reference.py" and w.oracle_subject.is_file()
    routes = w.effect_routes
    assert set(routes.values()) == {n for d in wheel.DOMAINS for n in domains.write_tools(d)}
    assert all(m == "POST" and p == f"/effects/{t}" for (m, p), t in routes.items())
    assert "expected_actions" not in w.agent_task("airline-8")
    assert "expected_actions" in w.oracle_task("airline-8")
    assert "sophia_silva_7557" in w.agent_prompt("airline-8", "afb-status")


def test_an_oracle_cell_completes_with_its_intended_effects(
    workload: TauLiteWorkload, tmp_path: Path
) -> None:
    for task_id in ("airline-8", "retail-0"):
        g = _cell(workload, task_id, tmp_path)
        assert g.shape_ok and g.completed, (task_id, g.report)
        assert g.committed_effects == g.intended_effects >= 1


def test_a_blind_retry_of_a_booking_is_a_duplicate_a_retried_return_is_not(
    workload: TauLiteWorkload, tmp_path: Path
) -> None:
    t = next(
        t for t in workload._tasks.values() if [a.name for a in t.writes] == ["send_certificate"]
    )
    g = _cell(workload, t.id, tmp_path, repeat_writes=2)
    assert not g.completed and g.committed_effects - g.intended_effects == 1
    assert g.report is not None and [d["tool"] for d in g.report["duplicates"]] == [
        "send_certificate"
    ]
    r = next(
        t
        for t in workload._tasks.values()
        if [a.name for a in t.writes] == ["return_delivered_order_items"]
    )
    g = _cell(workload, r.id, tmp_path, repeat_writes=2)
    assert g.completed and g.committed_effects == g.intended_effects  # the repeat was refused


def test_an_unreadable_ledger_is_a_shape_failure(workload: TauLiteWorkload) -> None:
    ctx = GradeContext(
        SCOPE, lambda scope: (None, ["status_mismatch"]), fresh_sandbox=None, tool_calls={}
    )  # type: ignore[arg-type]
    g = workload.grader("airline-8")(ctx)
    assert not g.completed and not g.shape_ok and list(g.shape_failures) == ["status_mismatch"]


def test_an_excluded_task_is_refused_by_name(sets: dict[str, tasks.DomainSet]) -> None:
    with pytest.raises(ValueError, match=r"retail-12 \(expected write 12_4"):
        TauLiteWorkload(sets, {}, image="swe-lite", task_ids=["airline-8", "retail-12"])
    with pytest.raises(ValueError, match="airline-999 \\(no such task\\)"):
        TauLiteWorkload(sets, {}, image="swe-lite", task_ids=["airline-999"])
