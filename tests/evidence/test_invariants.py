"""Property tests (hypothesis) of the evaluator's invariants from the RFC thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.evaluator.core.canonical import CanonicalError, canonical_bytes
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.core.types import Status
from runner.evaluator.evidence.hashing import evidence_root, leaf
from runner.evaluator.evidence.journal import line_leaf
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.faultkinds import NO_FAULT, injected_kinds
from runner.evaluator.publish.build import build_scorecard
from runner.evaluator.publish.rows import row_bytes
from runner.evaluator.verdict.eligibility import decide_subject, evaluate_run
from runner.evaluator.verdict.outcomes import (
    AttemptVerdict,
    TerminalRecord,
    jsonl_hash,
    terminal_line,
    terminal_records_hash,
)
from tests.evidence.synth import Run

EVAL = evaluator_digest()
N_CELLS = 20
VALID = ["completed", "failed", "duplicate", "pre_trigger"]
INVALID = ["noop", "no_witness", "harness", "wrong_scorer", "mismatch", None]
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _evaluate(outcomes_a: list[str | None], outcomes_b: list[str | None], order=None):
    r = Run(Path("/nonexistent"), in_memory=True)
    r.fill("a", lambda i, s: outcomes_a[i])
    r.fill("b", lambda i, s: outcomes_b[i])
    entries = list(r.memory or [])
    if order is not None:
        entries = [entries[i] for i in order]
    leaves = [leaf("0", rec.model_dump(mode="json")) for _, _, rec in entries]
    ev = LoadedEvidence(entries, evidence_root(leaves), [])
    return r, evaluate_run(r.protocol, ev, EVAL)


outcome = st.sampled_from(VALID + INVALID)
outcomes = st.lists(outcome, min_size=N_CELLS, max_size=N_CELLS)


@SETTINGS
@given(outcomes, outcomes, st.randoms(use_true_random=False))
def test_permuting_records_never_changes_a_decision(a, b, rnd) -> None:
    _, base = _evaluate(a, b)
    r, _ = _evaluate(a, b)
    order = list(range(len(r.memory or [])))
    rnd.shuffle(order)
    _, permuted = _evaluate(a, b, order)
    for subject in ("a", "b"):
        assert permuted[subject].proof == base[subject].proof
        assert permuted[subject].terminal_records == base[subject].terminal_records


@SETTINGS
@given(
    st.lists(st.sampled_from(VALID), min_size=N_CELLS, max_size=N_CELLS),
    outcomes,
    st.integers(min_value=0, max_value=N_CELLS - 1),
    st.sampled_from(INVALID),
)
def test_adding_an_invalid_cell_never_improves_eligibility(a, b, cell, bad) -> None:
    r, before = _evaluate(a, b)
    worse = list(a)
    worse[cell] = bad
    _, after = _evaluate(worse, b)
    pa, qa = before["a"].proof, after["a"].proof
    # Never better: eligible can only stay or become ineligible, coverage never grows.
    assert not (pa.decision == "ineligible" and qa.decision == "eligible")
    assert qa.coverage.witnessed <= pa.coverage.witnessed
    if qa.decision == "ineligible":
        try:
            build_scorecard(after["a"], r.slots)
        except ValueError:
            pass
        else:  # pragma: no cover - the property under test
            raise AssertionError("a scorecard was built from an ineligible proof")
    # The other subject is untouched by a's defect.
    assert after["b"].proof.decision == before["b"].proof.decision


@SETTINGS
@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=30), st.randoms())
def test_evidence_root_is_order_independent(items, rnd) -> None:
    leaves = [leaf(str(i), {"type": "x", "v": t}) for i, t in enumerate(items)]
    shuffled = list(leaves)
    rnd.shuffle(shuffled)
    assert evidence_root(leaves) == evidence_root(shuffled)
    if len(set(leaves)) > 1:
        assert evidence_root(leaves[1:]) != evidence_root(leaves)


# Keys and strings that look like the envelope's own members, to trip a naive byte search.
_TRICKY = st.sampled_from(
    ["seq", "prev", "record", "at_ns", ',"prev":', ',"record":', ',"seq":', '\\",', "é", "\x00"]
)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(max_size=6)
    | _TRICKY,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | _TRICKY, inner, max_size=3)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    st.dictionaries(st.text(max_size=4) | _TRICKY, _JSON, max_size=4),
    st.text(max_size=5) | _TRICKY,
    st.none() | st.just("sha256:" + "a" * 64),
    st.integers(1, 10**6),
)
def test_leaf_cut_from_the_line_equals_the_re_encoded_leaf(record, at_ns, prev, seq) -> None:
    # read_journal computes each leaf from the line's bytes instead of re-encoding the record.
    line = canonical_bytes({"seq": seq, "prev": prev, "at_ns": at_ns, "record": record})
    assert line_leaf(line) == leaf(at_ns, record)


_TEXT = st.text(max_size=8) | st.sampled_from(
    ["\x7f", "\u2028", "\x1f\x00", "é€😀", '"\\/', "\ud800"]
)
_INT = st.none() | st.integers(-(2**60), 2**60)
_VERDICT = st.builds(
    AttemptVerdict, attempt=st.integers(-(2**60), 2**60), reasons=st.lists(_TEXT, max_size=3),
    status=st.sampled_from(Status),
)  # fmt: skip


@SETTINGS
@given(
    st.builds(
        TerminalRecord,
        attempts=st.lists(_VERDICT, max_size=3),
        cell_id=_TEXT,
        committed_effects=_INT,
        completed=st.none() | st.booleans(),
        intended_effects=_INT,
        kind=st.sampled_from((NO_FAULT, *injected_kinds())),
        reasons=st.lists(_TEXT, max_size=3),
        scorer_version=st.none() | _TEXT,
        slot_id=_TEXT,
        status=st.none() | st.sampled_from(Status),
        stratum=_TEXT,
        subject_id=_TEXT,
        tool_calls=_INT,
        wall_ns=st.none() | _TEXT,
    )
)
def test_terminal_line_is_the_canonical_json_of_the_record(record: TerminalRecord) -> None:
    # terminal_line writes pydantic's own JSON; it must be RFC 8785 bytes, or fail like it.
    try:
        expected = canonical_bytes(record.model_dump(mode="json"))
    except CanonicalError:
        with pytest.raises(CanonicalError):
            terminal_line(record)
        return
    assert terminal_line(record) == expected


def test_terminal_records_hash_is_the_hash_of_the_written_file_in_any_input_order() -> None:
    _, before = _evaluate(["completed"] * N_CELLS, ["failed"] * N_CELLS)
    ev = before["a"]
    records = ev.terminal_records
    assert [r.cell_id for r in records] == sorted(r.cell_id for r in records)
    assert ev.terminal_jsonl == b"".join(terminal_line(r) + b"\n" for r in records)
    assert jsonl_hash(ev.terminal_jsonl) == ev.proof.terminal_records_hash
    assert terminal_records_hash(list(reversed(records))) == ev.proof.terminal_records_hash
    assert terminal_records_hash(records[1:]) != ev.proof.terminal_records_hash


def test_decide_subject_refuses_records_out_of_order_or_repeated() -> None:
    r = Run(Path("/nonexistent"), in_memory=True)
    r.fill("a", lambda i, s: "completed")
    ev = evaluate_run(
        r.protocol, LoadedEvidence(list(r.memory or []), "sha256:" + "0" * 64, []), EVAL
    )
    records = ev["a"].terminal_records
    shash = r.protocol.identities.subject_config_hashes["a"]
    for bad in (list(reversed(records)), [records[0], *records]):
        with pytest.raises(ValueError, match="cell-id order"):
            decide_subject(
                r.protocol, "a", shash, bad, [], "sha256:" + "0" * 64, True, EVAL, None, None
            )


_ROW_VALUE = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0**53, 2.0**60, 1e16, 1e-4, 9.9999e-5, 1.0e15 + 0.5])
    | _TEXT
)


_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_ABC0", min_size=1, max_size=6)  # fixed ASCII


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_KEY, _ROW_VALUE, min_size=1, max_size=6),
    st.lists(st.dictionaries(_KEY, _TEXT | st.integers(0, 9), max_size=3), max_size=3),
)
def test_row_bytes_are_the_canonical_json_of_the_row(row: dict, nested: list) -> None:  # type: ignore[type-arg]
    # Rows (cell-scores / cell-history lines) are written through pydantic's JSON with their keys
    # (fixed ASCII names) inserted in sorted order; the result must be RFC 8785 bytes, or fail
    # like them.
    ordered: dict = {"": [{k: d[k] for k in sorted(d)} for d in nested]}  # type: ignore[type-arg]
    ordered.update((k, row[k]) for k in sorted(row))  # "" sorts first
    try:
        expected = canonical_bytes(ordered)
    except CanonicalError:
        with pytest.raises(CanonicalError):
            row_bytes(dict(ordered))
        return
    assert row_bytes(dict(ordered)) == expected
