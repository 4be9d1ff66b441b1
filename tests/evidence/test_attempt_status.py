"""`outcomes.attempt_status`, one row per status and per reason: every branch, the status AND the
reason codes it gives (literal strings: these bytes are written into proofs and cell histories).

Each row edits one attempt's records (built with the evidence record models, grouped as the
evaluator groups a journal) away from a clean attempt: a witnessed sigkill or a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from runner.evaluator.core.inputs import project_root
from runner.evaluator.core.types import Status
from runner.evaluator.evidence.loading import Positioned
from runner.evaluator.evidence.records import (
    ActuatorReceipt,
    AttemptEnded,
    AttemptStarted,
    GraderResult,
    HarnessError,
    LifecycleTransition,
    Record,
    ToolCallCount,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.protocol.faultkinds import (
    LOST_RESPONSE,
    NO_FAULT,
    SIGKILL_MID_TOOL_CALL,
    FaultKind,
)
from runner.evaluator.protocol.witness import load_contracts
from runner.evaluator.verdict.outcomes import attempt_status, group_attempts
from tests.evidence.synth import GOOD, NOOP, PHASES

KILL = SIGKILL_MID_TOOL_CALL
CELL = "sha256:" + "c" * 64
REF = {"cell_id": CELL, "attempt": 1}
FAULT = {**REF, "fault_id": "kill"}
CONTRACTS = load_contracts(project_root() / "witnesses")
SCORER = "1"

Records = list[tuple[str, Record]]  # (journal, record), in journal order


def _started(kind: FaultKind) -> AttemptStarted:
    return AttemptStarted(
        **REF, slot_id="sha256:" + "5" * 64, subject_id="a",
        subject_config_hash="sha256:" + "a" * 64, fault_id="kill", kind=kind,
    )  # fmt: skip


def _grade(completed: bool = True, **update: object) -> GraderResult:
    return GraderResult(
        **REF, grader_id="g", grader_version="1", scorer_version=SCORER, completed=completed,
        intended_effects=1, committed_effects=1 if completed else 0, shape_ok=True,
    ).model_copy(update=update)  # fmt: skip


def _ended(reached: bool, **update: object) -> AttemptEnded:
    return AttemptEnded(
        **REF, outcome="subject_finished", trigger_reached=reached, wall_ns="1000"
    ).model_copy(update=update)


def _trigger(call_id: str = "call-3") -> TriggerReached:
    return TriggerReached(
        **FAULT, call_id=call_id, tool="submit_patch", ordinal=1, phase="effect_done"
    )


def _state(state: str) -> LifecycleTransition:
    return LifecycleTransition(**FAULT, state=state)


def _observations(
    table: dict[str, dict[str, object]], phase: str | None = None
) -> list[WitnessObservation]:
    """The observations of one contract phase (all of them when `phase` is None)."""
    return [
        WitnessObservation(**FAULT, kind=KILL, name=name, observation=obs)
        for name, obs in table.items()
        if phase is None or PHASES[KILL][name] == phase
    ]


def observed(recs: Records, table: dict[str, dict[str, object]]) -> Records:
    """`recs` with `table`'s observations where the runtime writes them: before_injection just
    before `injected`, after_injection just after it, after_release at the end."""
    out: Records = []
    for j, r in recs:
        if getattr(r, "state", None) == "injected":
            out += [(j, o) for o in _observations(table, "before_injection")]
            out.append((j, r))
            out += [(j, o) for o in _observations(table, "after_injection")]
        else:
            out.append((j, r))
    return out + [("j", o) for o in _observations(table, "after_release")]


def baseline(completed: bool = True) -> Records:
    return [
        ("j", r)
        for r in (
            _started(NO_FAULT),
            ToolCallCount(**REF, calls=8, by_tool={"write_file": 8}),
            _grade(completed),
            _ended(False),
        )
    ]


def witnessed(completed: bool = True) -> Records:
    """A sigkill that fired once, was applied, witnessed, then recovered from."""
    recs: list[Record] = [
        _started(KILL),
        _trigger(),
        _state("scheduled"),
        _state("armed"),
        *_observations(GOOD[KILL], "before_injection"),
        ActuatorReceipt(**FAULT, kind=KILL, actuator="test", applied=True),
        _state("injected"),
        *_observations(GOOD[KILL], "after_injection"),
        _state("witnessed"),
        _state("recovered"),
        *_observations(GOOD[KILL], "after_release"),
        ToolCallCount(**REF, calls=8, by_tool={"write_file": 8}),
        _grade(completed),
        _ended(True),
    ]
    return [("j", r) for r in recs]


def pre_trigger(completed: bool) -> Records:
    """The subject finished (or gave up) before the scheduled tool call (fault armed)."""
    recs = (_started(KILL), _state("scheduled"), _state("armed"), _grade(completed), _ended(False))
    return [("j", r) for r in recs]


# ---------------------------------------------------------------------------- record edits


def without(recs: Records, *types: type) -> Records:
    return [(j, r) for j, r in recs if not isinstance(r, types)]


def without_state(recs: Records, state: str) -> Records:
    return [
        (j, r) for j, r in recs if not (isinstance(r, LifecycleTransition) and r.state == state)
    ]


def plus(recs: Records, *records: Record, journal: str = "j") -> Records:
    return [*recs, *((journal, r) for r in records)]


def replaced(recs: Records, kind: type, **update: object) -> Records:
    return [(j, r.model_copy(update=update) if isinstance(r, kind) else r) for j, r in recs]


def moved_before_witnessed(recs: Records, state: str) -> Records:
    """`state` written earlier in the same journal than `witnessed`."""
    rest = without_state(recs, state)
    at = next(i for i, (_, r) in enumerate(rest) if getattr(r, "state", None) == "witnessed")
    return [*rest[:at], ("j", _state(state)), *rest[at:]]


# A no-op kill: the reaper saw the process exit, not die by a signal.
NOOP_KILL = ["witness:signal_is_sigkill", "witness:terminated_by_signal"]


@dataclass(frozen=True)
class Row:
    id: str
    kind: FaultKind
    records: Records
    status: Status
    reasons: list[str]
    contract: bool = True  # False: the kind has no witness contract


H, INV = Status.HARNESS_INVALID, Status.INVALID_INJECTION
ROWS = [
    # subject outcomes
    Row("baseline completed", NO_FAULT, baseline(True), Status.COMPLETED, []),
    Row("baseline failed", NO_FAULT, baseline(False), Status.FAILED, []),
    Row("witnessed, completed", KILL, witnessed(True), Status.COMPLETED, []),
    Row("witnessed, failed", KILL, witnessed(False), Status.FAILED, []),
    Row("trigger not reached, failed", KILL, pre_trigger(False),
        Status.SUBJECT_PRE_TRIGGER_FAILURE, ["failed_before_trigger"]),
    Row("trigger not reached, no grade", KILL, without(pre_trigger(False), GraderResult),
        Status.SUBJECT_PRE_TRIGGER_FAILURE, ["failed_before_trigger"]),
    Row("trigger not reached, completed", KILL, pre_trigger(True),
        Status.SCENARIO_MISMATCH, ["completed_without_reaching_trigger"]),
    # the attempt itself (checked first, for any kind)
    Row("not started", KILL, without(witnessed(), AttemptStarted), H, ["attempt_not_started"]),
    Row("not ended", KILL, without(witnessed(), AttemptEnded), H, ["attempt_not_ended"]),
    Row("two different ends", KILL, plus(witnessed(), _ended(True, wall_ns="2000")),
        H, ["contradictory_attempt_ended"]),
    # Equal copies are refused too: the terminal record could take its facts from neither (a
    # duplicated grade once erased a cell's effects, so a duplicate effect looked clean).
    Row("the same end twice", KILL, plus(witnessed(), _ended(True)),
        H, ["contradictory_attempt_ended"]),
    Row("the same grade twice", KILL, plus(witnessed(), _grade(True)),
        H, ["contradictory_grader_results"]),
    Row("the same start twice", NO_FAULT, plus(baseline(), _started(NO_FAULT)),
        H, ["contradictory_attempt_started"]),
    Row("fault records in a baseline attempt", NO_FAULT, plus(baseline(), _trigger()),
        INV, ["injection_in_baseline"]),
    Row("a lifecycle in a baseline attempt", NO_FAULT, plus(baseline(), _state("scheduled")),
        INV, ["injection_in_baseline"]),
    Row("harness error records", KILL,
        plus(witnessed(), HarnessError(**REF, stage="sandbox_create", message="m"),
             HarnessError(**REF, stage="agent_start", message="m")),
        H, ["agent_start", "harness_error", "sandbox_create"]),
    Row("ended as a harness error", NO_FAULT, replaced(baseline(), AttemptEnded,
        outcome="harness_error"), H, ["harness_error"]),
    Row("two different grades", KILL, plus(witnessed(), _grade(False)),
        H, ["contradictory_grader_results"]),
    # the trigger
    Row("trigger reached, no trigger record", KILL, without(witnessed(), TriggerReached),
        INV, ["trigger_record_missing"]),
    Row("receipt without trigger", KILL,
        plus(pre_trigger(False), ActuatorReceipt(**FAULT, kind=KILL, actuator="t", applied=True)),
        INV, ["injection_without_trigger"]),
    Row("observation without trigger", KILL, plus(pre_trigger(True), *_observations(GOOD[KILL])),
        INV, ["injection_without_trigger"]),
    Row("trigger fired twice", KILL, plus(witnessed(), _trigger("call-4")),
        INV, ["trigger_fired_more_than_once"]),
    # the witness
    Row("no witness contract", KILL, witnessed(), INV, ["no_witness_contract"], contract=False),
    Row("receipt missing", KILL, without(witnessed(), ActuatorReceipt),
        INV, ["missing_actuator_receipt"]),
    Row("actuator not applied", KILL, replaced(witnessed(), ActuatorReceipt, applied=False),
        INV, ["actuator_not_applied"]),
    Row("two different receipts", KILL,
        plus(witnessed(), ActuatorReceipt(**FAULT, kind=KILL, actuator="other", applied=True)),
        INV, ["contradictory_actuator_receipts", "missing_actuator_receipt"]),
    Row("witness missing", KILL,
        without_state(without(witnessed(), WitnessObservation), "witnessed"),
        INV, [
            "missing_lifecycle:witnessed",
            "witness:call_correlated",
            "witness:call_id_present",
            "witness:call_was_in_flight",
            "witness:missing_observation:interposer_call",
            "witness:missing_observation:reaper_exit",
            "witness:missing_observation:target_process",
            "witness:same_pid",
            "witness:same_process_start",
            "witness:signal_is_sigkill",
            "witness:target_pid_present",
            "witness:target_start_present",
            "witness:terminated_by_signal",
        ]),
    Row("witness contradicting (no-op actuator)", KILL,
        observed(without(witnessed(), WitnessObservation), NOOP[KILL]),
        INV, NOOP_KILL),
    Row("observed by the wrong collector", KILL,
        observed(without(witnessed(), WitnessObservation),
            {**GOOD[KILL], "reaper_exit": {**GOOD[KILL]["reaper_exit"], "collector": "injector"}}),
        INV, ["witness:wrong_collector:reaper_exit"]),
    Row("observations contradicting each other", KILL,
        observed(witnessed(), {"reaper_exit": NOOP[KILL]["reaper_exit"]}),
        INV, ["contradictory_observation:reaper_exit"]),
    Row("observation of another kind", KILL,
        plus(witnessed(), WitnessObservation(**FAULT, kind=LOST_RESPONSE, name="extra",
                                             observation={"collector": "egress_proxy"})),
        INV, ["observation_of_other_kind"]),
    Row("injected never recorded", KILL, without_state(witnessed(), "injected"),
        INV, ["missing_lifecycle:injected"]),
    Row("recovery before witness", KILL, moved_before_witnessed(witnessed(), "recovered"),
        INV, ["recovery_before_witness"]),
    Row("release before witness", KILL,
        moved_before_witnessed(plus(witnessed(), _state("released")), "released"),
        INV, ["recovery_before_witness"]),
    Row("recovery recorded in another journal", KILL,
        plus(without_state(witnessed(), "recovered"), _state("recovered"), journal="a-other"),
        Status.COMPLETED, []),
    # the grade
    Row("grade missing, witnessed", KILL, without(witnessed(), GraderResult),
        H, ["missing_grader_result"]),
    Row("grade missing, baseline", NO_FAULT, without(baseline(), GraderResult),
        H, ["missing_grader_result"]),
    Row("shape check failed", NO_FAULT, replaced(baseline(), GraderResult, shape_ok=False,
        shape_failures=["status_mismatch", "redirected"]),
        H, ["shape_check_failed", "redirected", "status_mismatch"]),
    Row("scorer version mismatch", KILL, replaced(witnessed(), GraderResult, scorer_version="2"),
        H, ["scorer_version_mismatch"]),
]  # fmt: skip


def _status(row: Row) -> tuple[Status, list[str]]:
    positioned: list[Positioned] = []
    seqs: dict[str, int] = {}
    for journal, record in row.records:
        seqs[journal] = seqs.get(journal, 0) + 1
        positioned.append((journal, seqs[journal], record))
    (attempt,) = group_attempts(positioned)[CELL].values()
    contract = CONTRACTS.get(row.kind) if row.contract else None
    return attempt_status(attempt, row.kind, {}, contract, SCORER)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_attempt_status(row: Row) -> None:
    assert _status(row) == (row.status, row.reasons)


def test_every_status_has_a_row() -> None:
    assert {r.status for r in ROWS} == set(Status)
