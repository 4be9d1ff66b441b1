"""results/draft-diagnostics.{jsonl,md}: a draft run's per-cell diagnostics, derived from the
evidence (re-derived by verify), marked "draft: not a result"; never for a frozen run; each
launch's output tail as the runtime journaled it in `subject_exit`."""

from __future__ import annotations

import json
from pathlib import Path

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.records import OUTPUT_TAIL_CHARS, SubjectExit
from runner.evaluator.publish.diagnostics import DRAFT_NOTE
from runner.evaluator.publish.results import derive, verify, write_results
from runner.report import load_run, render_html
from tests.evidence.synth import Run

DIAG = "results/draft-diagnostics.jsonl"
MD = "results/draft-diagnostics.md"
TYPO = "env: 'pythno': No such file or directory"


def _draft(tmp: Path, frozen: bool = False) -> Run:
    r = Run(tmp / "run", frozen=frozen)
    cells = r.cells("a")
    for i, (cell, slot) in enumerate(cells[:3]):  # a subset: three cells of a ran, b none
        r.write_attempt("a", cell, slot, 1, "completed" if i else "pre_trigger")
    # a launch's exit with its output tail, as the runtime journals it (appended to the first
    # cell's attempt journal: the chain continues)
    cell, _ = cells[0]
    with r.store.journal(f"{cell[7:23]}-a1") as j:
        j.append(SubjectExit(cell_id=cell, attempt=1, pid=7, start_time="1", exited=True,
                             exit_code=127, signaled=False, term_signal=None, restart_index=0,
                             stderr_tail=TYPO,
                             stdout_tail=None))  # fmt: skip
    return r


def test_a_draft_gets_per_cell_diagnostics_that_verify_rederives(tmp_path: Path) -> None:
    r = _draft(tmp_path)
    _, results, files = derive(r.run_dir, evaluator_digest())
    assert all(x.scorecard is None for x in results.values())  # still no scorecard
    rows = [json.loads(x) for x in files[DIAG].splitlines()]
    assert len(rows) == 3 and {x["subject_id"] for x in rows} == {"a"}
    assert all(x["note"] == DRAFT_NOTE for x in rows)
    broken = next(x for x in rows if x["launches"])
    assert broken["launches"] == [
        {"launch": 0, "exit_code": 127, "signal": None, "stdout_tail": None, "stderr_tail": TYPO}
    ]
    assert broken["status"] in {"FAILED", "SUBJECT_PRE_TRIGGER_FAILURE"}
    ok = [x for x in rows if x["status"] == "COMPLETED"]
    assert ok and all(x["tool_calls"] == 8 and x["model_calls"] == 0 for x in ok)
    md = files[MD].decode()
    assert DRAFT_NOTE in md and "3 of 40 registered cells" in md and "pythno" in md
    assert "exit 127" in md
    # no rate, no aggregate: nothing in the file is a fraction or a percentage of cells
    assert "%" not in md and "completion" not in md.lower()
    write_results(r.run_dir, files)
    assert verify(r.run_dir, evaluator_digest()) == []
    (r.run_dir / MD).write_text(md.replace("exit 127", "exit 0"))
    assert f"{MD}: differs from what the evidence derives" in verify(r.run_dir, evaluator_digest())
    (r.run_dir / MD).write_text(md)
    html = render_html(load_run(r.run_dir))
    assert 'id="draft-diagnostics"' in html and "pythno" in html and DRAFT_NOTE in html


def test_a_frozen_run_has_no_diagnostics(tmp_path: Path) -> None:
    r = _draft(tmp_path, frozen=True)
    _, _, files = derive(r.run_dir, evaluator_digest())
    assert DIAG not in files and MD not in files
    # and verify refuses one planted beside its results
    write_results(r.run_dir, files)
    (r.run_dir / DIAG).write_bytes(b"{}\n")
    assert f"{DIAG}: not derivable from the evidence (unexpected file)" in verify(
        r.run_dir, evaluator_digest()
    )
    assert 'id="draft-diagnostics"' not in render_html(load_run(r.run_dir, timelines=False))


def test_subject_exit_without_tails_keeps_its_earlier_written_form() -> None:
    x = SubjectExit(cell_id="sha256:" + "0" * 64, attempt=1, pid=1, start_time="1", exited=True,
                    exit_code=0, signaled=False, term_signal=None, restart_index=0)  # fmt: skip
    assert "stderr_tail" not in x.model_dump(mode="json")
    assert OUTPUT_TAIL_CHARS >= 1024
