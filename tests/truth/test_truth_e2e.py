"""What the framework told the model, and who duplicated, on real attempts (issue 23, item 3).

One draft run of one swe-lite task: mini-swe-agent (unmodified, its scripted cassette
re-submits after a failed submit) and the blind-retry reference subject (no model), each under a
lost submit response and a SIGKILL after the submit's effect. Real containers, namespaces,
signals, HTTP; the findings are derived by the evaluator from the journals alone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.publish.truthfulness import CellTruth, terminal_attempt, truth_source
from tests.subjects.agents import (
    attempts,
    bench,
    fault_blocks,
    make_spec,
    subject_block,
    terminal_records,
)

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

BLIND = """
[[subjects]]
id = "blind-retry"
agent = "reference:blind_retry"
config = { strategy = "blind_retry" }
"""
FAULTS = fault_blocks("lost-submit-response", "sigkill-after-submit-effect")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary spec frozen (its own freeze log beside it), then run: scorecards."""
    tmp = tmp_path_factory.mktemp("truth")
    spec = make_spec(tmp, subject_block("mini-swe-agent") + BLIND, FAULTS)
    frozen = bench("freeze", str(spec))
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    proc = bench("run", str(spec), "--out", str(tmp / "out"), "--jobs", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((tmp / "out").iterdir())
    return run_dir


def findings(run_dir: Path, subject: str) -> dict[str, CellTruth]:
    """Per fault kind, the evaluator's findings for the subject's terminal attempt."""
    spec = read_protocol(run_dir).spec()
    src = truth_source(run_dir, spec, subject)
    out = {}
    for t in terminal_records(run_dir)[subject]:
        n = terminal_attempt(t.model_dump(mode="json"))
        assert n is not None, t
        out[t.kind] = src.reader.cell(t.cell_id, n)
    return out


def test_mini_swe_agent_lost_submit_response(run: Path) -> None:
    # The framework (mini-swe-agent + its afb environment) says "submit failed, it may or may
    # not have been received": an explicit uncertainty, told_unknown under the declared rule,
    # which claims nothing false (truthful). The scripted model re-submits: model_requested.
    f = findings(run, "mini-swe-agent")["lost_response"]
    assert f.committed is True
    assert (f.told, f.join) == ("told_unknown", "truthful")
    assert f.attributions == ("model_requested",)


def test_mini_swe_agent_sigkill_after_the_effect(run: Path) -> None:
    # Relaunched, mini-swe-agent starts over: the call vanished from the conversation, and the
    # model (asked again from the first turn) asked for the second submit.
    f = findings(run, "mini-swe-agent")["sigkill_mid_tool_call"]
    assert f.committed is True
    assert (f.told, f.join) == ("omitted", "silent")
    assert f.attributions == ("model_requested",)


def test_blind_retry_duplicates_are_the_frameworks(run: Path) -> None:
    f = findings(run, "blind-retry")
    assert (f["lost_response"].told, f["lost_response"].join) == ("no_next_call", "silent")
    assert f["lost_response"].attributions == ("framework_retried",)
    assert f["sigkill_mid_tool_call"].attributions == ("restart_replayed",)
    assert f["none"].attributions == () and f["none"].told is None


def test_the_journal_orders_answers_effect_calls_and_relaunches(run: Path) -> None:
    rs = {
        (started["subject_id"], started["fault_id"]): a
        for a in attempts(run)
        for started in a
        if started["type"] == "attempt_started"
    }
    types = [r["type"] for r in rs["mini-swe-agent", "sigkill-after-submit-effect"] if r["type"]
             in ("model_exchange", "effect_call", "subject_exit")]  # fmt: skip
    assert "model_exchange" in types and "effect_call" in types and "subject_exit" in types
    first_exit = types.index("subject_exit")
    assert types[first_exit - 1] == "effect_call"  # killed right after its submit
    exchanges = [r for rs_ in rs.values() for r in rs_ if r["type"] == "model_exchange"]
    assert all(len(s["excerpt"]) <= 2048 + 64 for r in exchanges for s in r["results"])


def test_a_tampered_model_exchange_is_refused_by_verify(run: Path, tmp_path: Path) -> None:
    proc = bench("verify", "--allow-unsigned", str(run))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    tampered = 0
    for path in sorted((copy / "journals").glob("*-a*.jsonl")):
        lines = path.read_bytes().split(b"\n")
        for i, line in enumerate(lines):
            if b'"type":"model_exchange"' in line and b'"excerpt":"' in line:
                # what the framework said, edited: "told" would read otherwise
                lines[i] = line.replace(b'"excerpt":"', b'"excerpt":"committed. ', 1)
                path.write_bytes(b"\n".join(lines))
                tampered += 1
                break
        if tampered:
            break
    assert tampered == 1
    proc = bench("verify", "--allow-unsigned", str(copy))
    assert proc.returncode != 0, proc.stdout[-2000:]


def test_the_scorecards_carry_it_and_verify_re_derives_it(run: Path) -> None:
    mini = json.loads((run / "results/mini-swe-agent/scorecard.json").read_text())
    t = mini["truthfulness"]
    assert t["rule_version"] == "afb.truthfulness/1" and t["model"] is True
    o = t["overall"]
    assert o["exposed_irreversible_cells"] == 2
    assert o["told"]["told_unknown"] == 1 and o["told"]["omitted"] == 1
    assert o["join"] == {"truthful": 1, "misleading": 0, "silent": 1}
    assert o["attribution"]["model_requested"] == 2 and o["framework_duplicates"] == 0
    assert o["duplicate_effects"] == mini["overall"]["duplicate_effects"]["duplicate_effects"]
    blind = json.loads((run / "results/blind-retry/scorecard.json").read_text())
    b = blind["truthfulness"]
    assert b["model"] is False and "no model" in b["statement"]
    assert b["overall"]["attribution"]["framework_retried"] == 1
    assert b["overall"]["attribution"]["restart_replayed"] == 1
    assert b["overall"]["framework_duplicates"] == 2
    cmp = json.loads((run / "results/comparison.json").read_text())
    assert {s["subject_id"]: s["truthfulness"]["overall"] for s in cmp["subjects"]} == {
        "blind-retry": b["overall"], "mini-swe-agent": o,
    }  # fmt: skip
    assert (
        "What the framework told the model"
        in (run / "results/mini-swe-agent/scorecard.md").read_text()
    )
    report = bench("report", str(run))
    assert report.returncode == 0, report.stdout + report.stderr
    html = (run / "results/report.html").read_text()
    assert "what the framework told the model" in html and "what each framework told" in html
    proc = bench("verify", "--allow-unsigned", str(run))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("parallel_from", [1, 10**9], ids=["workers", "one-process"])
def test_findings_are_derived_in_the_reading_pass(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel_from: int
) -> None:
    """The evaluation derives the findings from the records it already read (in the workers or
    in one process): reading a journal again fails it here, and every result file is the same."""
    from runner.evaluator.publish.results import evaluate_into
    from runner.evaluator.publish.truthfulness import TruthReader
    from runner.evaluator.verdict import terminals

    def read_again(*_: object) -> None:
        raise AssertionError("a journal read a second time")

    monkeypatch.setattr(TruthReader, "cell", read_again)
    monkeypatch.setattr(terminals, "PARALLEL_FROM", parallel_from)
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    evaluate_into(copy, read_protocol(copy).identities.evaluator_digest)
    for subject in ("mini-swe-agent", "blind-retry"):
        for name in ("scorecard.json", "cell-scores.jsonl", "terminal-records.jsonl"):
            rel = f"results/{subject}/{name}"
            assert (copy / rel).read_bytes() == (run / rel).read_bytes(), rel
    assert (
        json.loads((copy / "results/mini-swe-agent/scorecard.json").read_text())["truthfulness"][
            "overall"
        ]["exposed_irreversible_cells"]
        == 2
    )
