"""The publication boundary, differentially: an ineligible subject's published bytes do not
depend on how well it did.

Take an ineligible subject's evidence, flip the outcome of any of its cells among outcomes that
differ only in the subject's success (completed / failed / duplicated effects / tool calls and
wall time, and, for a fault whose trigger was not reached, completed-without-reaching-it /
failed-before-it), re-derive: every byte of its incomplete-evidence report, its Markdown and its
cell history is the same once hashes are masked (the evidence root and the proof hash commit to
the evidence, so they must differ). The evidence that makes the subject ineligible (a no-op
injection, a missing cell, a harness error) is held fixed.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.evaluator.evidence.hashing import evidence_root, leaf
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.publish.results import render_results
from runner.evaluator.verdict.eligibility import evaluate_run
from tests.evidence.synth import Run

EVAL = "sha256:" + "0" * 64
DIGEST = re.compile(rb"sha256:[0-9a-f]{64}")
REPORT_FILES = ("incomplete-evidence.json", "incomplete-evidence.md", "cell-history.jsonl")

# Outcomes a subject's own success decides, given the same injected evidence (synth OUTCOMES).
FINISHED = ["completed", "failed", "duplicate"]  # the trigger (if any) was reached
UNREACHED = ["mismatch", "pre_trigger"]  # a faulted cell whose trigger was not reached
FIXED = ["noop", "no_witness", "harness", None]  # not the subject's doing: held fixed
CALLS = [4, 8, 16]

_TEMPLATE = Run(Path("/nonexistent"), in_memory=True)
SLOTS = [s for _, s in _TEMPLATE.cells("b")]


def _publish(choice: list[object]) -> dict[str, bytes]:
    r = Run(Path("/nonexistent"), in_memory=True)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: choice[i])  # type: ignore[return-value]
    entries = list(r.memory or [])
    root = evidence_root(
        [leaf(str(n), rec.model_dump(mode="json")) for n, (_, _, rec) in enumerate(entries)]
    )
    evaluations = evaluate_run(r.protocol, LoadedEvidence(entries, root, []), EVAL)
    assert evaluations["b"].proof.decision == "ineligible"
    _, files = render_results(r.protocol, evaluations, ["journals/x.jsonl", "protocol.json"])
    return {k.removeprefix("results/b/"): v for k, v in files.items() if k.startswith("results/b/")}


@st.composite
def flipped_pair(draw: st.DrawFn) -> tuple[list[object], list[object]]:
    """Two outcome assignments for b that differ only in the subject's success."""
    first: list[object] = []
    second: list[object] = []
    for slot in SLOTS:
        faulted = slot.schedule.kind != NO_FAULT
        group = draw(
            st.sampled_from(
                ["finished", "unreached", "fixed"] if faulted else ["finished", "fixed"]
            )
        )
        if group == "fixed":
            fixed = draw(st.sampled_from(FIXED if faulted else ["harness", None]))
            first.append(fixed)
            second.append(fixed)
            continue
        members = FINISHED if group == "finished" else UNREACHED
        for out in (first, second):
            out.append((draw(st.sampled_from(members)), draw(st.sampled_from(CALLS))))
    # at least one cell the subject cannot fix: a no-op injection on the first faulted slot
    k = next(i for i, s in enumerate(SLOTS) if s.schedule.kind != NO_FAULT)
    first[k] = second[k] = "noop"
    return first, second


def _masked(data: bytes) -> bytes:
    return DIGEST.sub(b"sha256:<masked>", data)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flipped_pair())
def test_flipping_an_ineligible_subjects_success_changes_no_report_byte(
    pair: tuple[list[object], list[object]],
) -> None:
    one, two = (_publish(c) for c in pair)
    assert sorted(one) == sorted(two)
    for name in REPORT_FILES:
        assert _masked(one[name]) == _masked(two[name]), name


def _all(outcome: object, unreached: str) -> list[object]:
    out: list[object] = []
    for i, s in enumerate(SLOTS):
        if i == next(j for j, t in enumerate(SLOTS) if t.schedule.kind != NO_FAULT):
            out.append("noop")
        elif s.schedule.kind == NO_FAULT:
            out.append(outcome)
        else:
            out.append(unreached)
    return out


def test_trigger_not_reached_cells_are_sealed_whether_completed_or_failed() -> None:
    """The issue's case, spelled out: every unreached trigger completed vs every one failed."""
    completed = _publish(_all("completed", "mismatch"))
    failed = _publish(_all("failed", "pre_trigger"))
    for name in REPORT_FILES:
        assert _masked(completed[name]) == _masked(failed[name]), name
    assert b"SCENARIO_MISMATCH" not in completed["incomplete-evidence.json"]
    assert b"completed_without_reaching_trigger" not in completed["cell-history.jsonl"]


def test_the_differential_check_can_fail() -> None:
    """Negative control: a change the subject does not decide (a missing cell) does show."""
    base = _all("completed", "mismatch")
    other = list(base)
    other[-1] = None
    one, two = _publish(base), _publish(other)
    assert _masked(one["incomplete-evidence.json"]) != _masked(two["incomplete-evidence.json"])


def test_an_ineligible_subjects_proof_says_nothing_of_its_success() -> None:
    """proof.json is published beside the report: it must not count completions either."""
    completed = _publish(_all("completed", "mismatch"))
    failed = _publish(_all("failed", "pre_trigger"))
    assert _masked(completed["proof.json"]) == _masked(failed["proof.json"])
