"""Measures over exposed cells (issue 13): duplicate effects over witnessed faulted cells,
recovery overhead over recovered ones, pre-trigger failures counted as not completed and on
their own; fault coverage = witnessed / scheduled faulted cells; a scenario mismatch blocks its
stratum's comparison, not the subject."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.core.types import Status
from runner.evaluator.protocol.faultkinds import LOST_RESPONSE, NO_FAULT
from runner.evaluator.publish.compare import compare
from runner.evaluator.publish.results import derive, write_results
from runner.evaluator.publish.scoring import Tally
from tests.evidence.synth import Run

EVAL = evaluator_digest()
ALL = ("completion", "duplicate_effects", "recovery_overhead")


def _run(tmp_path: Path, a) -> Run:
    r = Run(tmp_path / "run")
    r.fill("a", a)
    r.fill("b", lambda i, s: "completed")
    return r


def test_scenario_mismatch_blocks_its_stratum_not_the_subject(tmp_path: Path) -> None:
    def a(i: int, s) -> str:
        hit = s.schedule.kind == LOST_RESPONSE and s.task_id == "h1"
        return "mismatch" if hit else "completed"

    r = _run(tmp_path, a)
    _, res, files = derive(r.run_dir, EVAL)
    stratum = "fault_kind=lost_response,task_bucket=hard"
    proof = res["a"].evaluation.proof
    assert proof.decision == "eligible" and proof.reason_codes == []
    assert proof.scenario_mismatch_strata == [stratum]
    card = res["a"].scorecard
    assert card is not None and card.scenario_mismatch_strata == [stratum]
    # Not completed, not exposed: the cell counts in completion's denominator only.
    m = card.strata[stratum]
    assert m.completion is not None and (m.completion.completed, m.completion.cells) == (1, 2)
    assert m.duplicate_effects is not None and m.duplicate_effects.exposed_cells == 1
    assert proof.coverage.witnessed == 15 and proof.coverage.scheduled == 16
    # The comparison leaves the stratum out for every subject, and sums the rest.
    write_results(r.run_dir, files)
    comparison, reasons = compare(
        [r.run_dir / "results/a/scorecard.json", r.run_dir / "results/b/scorecard.json"]
    )
    assert reasons == [] and comparison is not None
    assert comparison.not_comparable_strata == [f"scenario_mismatch_stratum:{stratum}"]
    for s in comparison.subjects:
        assert stratum not in s.strata and len(s.strata) == 9
        assert s.overall.completion is not None and s.overall.completion.cells == 18
        o = s.overall.recovery_overhead
        assert o is not None and o.wall_time_ratio_median is None  # a median does not sum


def test_pre_trigger_and_failed_cells_are_not_exposed(tmp_path: Path) -> None:
    faulted = [i for i, (_, s) in enumerate(Run(tmp_path / "p").cells("a"))
               if s.schedule.kind != NO_FAULT]  # fmt: skip
    pre, failed = set(faulted[:3]), set(faulted[3:5])

    def a(i: int, s) -> str:
        return "pre_trigger" if i in pre else "failed" if i in failed else "completed"

    _, res, files = derive(_run(tmp_path, a).run_dir, EVAL)
    card = res["a"].scorecard
    assert card is not None, res["a"].evaluation.proof.reason_codes
    cov = card.proof.coverage
    assert (cov.registered, cov.decided, cov.baseline, cov.scheduled) == (20, 20, 4, 16)
    assert (cov.witnessed, cov.pre_trigger_failures) == (13, 3)
    o = card.overall
    assert o.completion is not None and o.duplicate_effects is not None
    assert (o.completion.completed, o.completion.cells, o.completion.pre_trigger_failures) == (
        15, 20, 3)  # fmt: skip
    assert o.duplicate_effects.exposed_cells == 13
    assert o.recovery_overhead is not None
    assert (o.recovery_overhead.pairs, o.recovery_overhead.unrecovered) == (11, 2)
    rows = [json.loads(x) for x in files["results/a/cell-scores.jsonl"].splitlines()]
    assert sum(r["exposed"] for r in rows) == 13
    assert all(r["extra_tool_calls"] is None for r in rows if r["status"] != "COMPLETED")


# ------------------------------------------------------------------------- property (Tally)

STATUSES = [Status.COMPLETED, Status.FAILED, Status.SUBJECT_PRE_TRIGGER_FAILURE,
            Status.SCENARIO_MISMATCH]  # fmt: skip
cell = st.tuples(
    st.sampled_from(STATUSES),
    st.booleans(),  # faulted
    st.integers(0, 3),  # duplicate effects
    st.one_of(st.none(), st.integers(-20, 20)),  # extra tool calls against the baseline
    st.one_of(st.none(), st.floats(0.1, 10, allow_nan=False)),  # wall-time ratio
)


def _tally(cells) -> Tally:
    t = Tally()
    for status, faulted, dup, extra, wall in cells:
        if status in (Status.SUBJECT_PRE_TRIGGER_FAILURE, Status.SCENARIO_MISMATCH):
            faulted = True  # only a faulted cell can miss its trigger
        t.add(status, faulted, dup, extra, wall)
    return t


@settings(max_examples=300, deadline=None)
@given(
    st.lists(cell, max_size=30),
    st.integers(0, 3),
    st.one_of(st.none(), st.integers(-20, 20)),
    st.one_of(st.none(), st.floats(0.01, 10, allow_nan=False)),
)
def test_adding_a_pre_trigger_failure_never_improves_a_subject(cells, dup, extra, wall) -> None:
    before = _tally(cells).measures(ALL)
    after_t = _tally(cells)
    after_t.add(Status.SUBJECT_PRE_TRIGGER_FAILURE, True, dup, extra, wall)
    after = after_t.measures(ALL)
    assert before.duplicate_effects is not None and after.duplicate_effects is not None
    sb, sa = (before.duplicate_effects.share_without_duplicates,
              after.duplicate_effects.share_without_duplicates)  # fmt: skip
    assert (sb is None and sa is None) or (sb is not None and sa is not None and sa == sb)
    ob, oa = before.recovery_overhead, after.recovery_overhead
    assert oa is not None
    # Overhead: the same pairs, the same extra calls and wall-time ratios (never cheaper).
    if ob is not None:
        for name in ("pairs", "extra_tool_calls_total", "extra_tool_calls_mean",
                     "wall_time_ratio_median"):  # fmt: skip
            assert getattr(oa, name) == getattr(ob, name), name
    else:
        assert oa.pairs == 0 and oa.extra_tool_calls_mean is None
    # Completion: one more cell, not completed, counted as a pre-trigger failure.
    cb, ca = before.completion, after.completion
    assert cb is not None and ca is not None
    assert (ca.cells, ca.completed, ca.pre_trigger_failures) == (
        cb.cells + 1, cb.completed, cb.pre_trigger_failures + 1)  # fmt: skip
    if cb.rate is not None and ca.rate is not None:
        assert ca.rate.numerator * cb.rate.denominator <= cb.rate.numerator * ca.rate.denominator
