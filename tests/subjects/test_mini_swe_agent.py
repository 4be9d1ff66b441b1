"""mini-swe-agent, unmodified, end to end on one swe-lite task (real containers, netns, signals).

One draft run of cachetools-cached-info: baseline, a lost model response, a lost submit response
and SIGKILL after the submit's effect. The model is the scripted cassette of the task, served by
the model proxy; every bash action goes through the tool interposer; the submit command reaches
the destination through the egress proxy. What mini-swe-agent does after each fault is read from
the destination's own ledger, never from the agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.runtime.cassettes.load import cassette_bytes, load_cassette
from tests.subjects.agents import (
    ROOT,
    TASK,
    attempts,
    attempts_by_fault,
    bench,
    blob,
    fault_blocks,
    make_spec,
    run_draft,
    subject_block,
    terminal_records,
)

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

FAULTS = fault_blocks("lost-model-response", "lost-submit-response", "sigkill-after-submit-effect")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("msa")
    spec = make_spec(tmp, subject_block("mini-swe-agent"), FAULTS)
    proc, run_dir = run_draft(spec, tmp / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    return run_dir


def _ledger(rs: list[dict[str, Any]], run_dir: Path) -> list[str]:
    (end,) = [r for r in rs if r["type"] == "attempt_ended"]
    lines = blob(run_dir, end["ledger"]).decode().splitlines()
    return [line for line in lines if line.strip()]


def test_every_cell_completes_and_every_fault_is_witnessed(run: Path) -> None:
    (cells,) = terminal_records(run).values()
    status = {t.kind + ":" + str(t.committed_effects): t.status.value for t in cells}
    assert all(s == "COMPLETED" for s in status.values()), status
    by_fault = attempts_by_fault(run)
    assert set(by_fault) == {
        "none", "lost-model-response", "lost-submit-response", "sigkill-after-submit-effect"
    }  # fmt: skip
    for fault, rs in by_fault.items():
        states = [r["state"] for r in rs if r["type"] == "lifecycle"]
        if fault == "none":
            assert states == []
        else:
            assert "witnessed" in states and "rejected" not in states, (fault, states)


def test_baseline_uses_the_model_proxy_the_sandbox_and_the_submit(run: Path) -> None:
    rs = attempts_by_fault(run)["none"]
    (calls,) = [r for r in rs if r["type"] == "tool_calls"]
    # the cassette's five turns: look, copy+read, fix, test, submit
    assert calls["by_tool"] == {"model": 5, "exec": 5, "submit_patch": 1}
    (grade,) = [r for r in rs if r["type"] == "grader_result"]
    assert grade["completed"] and grade["committed_effects"] == 1
    assert len(_ledger(rs, run)) == 1


def test_a_lost_model_response_is_retried_without_a_duplicate(run: Path) -> None:
    rs = attempts_by_fault(run)["lost-model-response"]
    (calls,) = [r for r in rs if r["type"] == "tool_calls"]
    assert calls["by_tool"]["model"] == 6  # the lost answer was asked for again
    assert len(_ledger(rs, run)) == 1


def test_a_lost_submit_response_makes_mini_swe_agent_submit_again(run: Path) -> None:
    # Told that the submit failed, the (scripted) model submits again: mini-swe-agent has no
    # idempotency key and does not ask the destination first, so the effect lands twice.
    rs = attempts_by_fault(run)["lost-submit-response"]
    assert len(_ledger(rs, run)) == 2
    (grade,) = [r for r in rs if r["type"] == "grader_result"]
    assert grade["committed_effects"] == 2 and grade["intended_effects"] == 1


def test_sigkill_after_the_submit_effect_starts_over_and_duplicates(run: Path) -> None:
    rs = attempts_by_fault(run)["sigkill-after-submit-effect"]
    exits = [r for r in rs if r["type"] == "subject_exit"]
    assert [(e["restart_index"], e["signaled"]) for e in exits] == [(0, True), (1, False)]
    (calls,) = [r for r in rs if r["type"] == "tool_calls"]
    assert calls["by_tool"]["model"] == 10  # it started over: every turn again
    assert len(_ledger(rs, run)) == 2  # the destination's own ledger: committed twice


def test_the_served_cassette_is_a_blob_of_the_evidence(run: Path) -> None:
    cassette = load_cassette(ROOT / "specs" / "swe-lite-agents" / "cassettes" / f"{TASK}.json")
    import hashlib

    address = hashlib.sha256(cassette_bytes(cassette)).hexdigest()
    assert (run / "blobs" / "sha256" / address).is_file()
    for rs in attempts(run):  # every attempt's end names it: the layout check accounts for it
        (end,) = [r for r in rs if r["type"] == "attempt_ended"]
        assert end["served_cassette"] == f"sha256:{address}"
        assert "recorded_cassette" not in end  # scripted: nothing recorded, the field left out


def test_the_run_verifies(run: Path) -> None:
    """Every blob of a model-proxy run is named by a record (the cassette by attempt_ended)."""
    proc = bench("verify", "--allow-unsigned", str(run))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
