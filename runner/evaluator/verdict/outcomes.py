"""Terminal status per cell, from its attempts under the attempt policy (DESIGN §4).

Input is the multiset of journal entries; every decision here depends only on record *content*
and each record's position inside its own journal (seq), never on the order entries arrive in,
so permuting them changes nothing.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

from runner.evaluator.core import reasons as R
from runner.evaluator.core.canonical import MAX_SAFE_INTEGER, fast_canonical_bytes
from runner.evaluator.core.types import Frozen, Status
from runner.evaluator.evidence.loading import Positioned
from runner.evaluator.evidence.records import (
    ActuatorReceipt,
    AttemptEnded,
    AttemptStarted,
    EffectCall,
    GraderResult,
    HarnessError,
    LifecycleTransition,
    ModelExchange,
    Record,
    SubjectExit,
    ToolCallCount,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.protocol.faultkinds import NO_FAULT, FaultKind
from runner.evaluator.protocol.spec import AttemptPolicy
from runner.evaluator.protocol.witness import WitnessContract, WitnessVerdict, evaluate_witness

SUBJECT_OUTCOMES = frozenset(
    {
        Status.COMPLETED,
        Status.FAILED,
        Status.SUBJECT_PRE_TRIGGER_FAILURE,
        Status.SCENARIO_MISMATCH,
    }
)


# Both models declare their fields in RFC 8785 member order (sorted keys), so pydantic's own
# compact JSON is their canonical line (terminal_line below; a test holds this).


class AttemptVerdict(Frozen):
    attempt: int
    reasons: list[str]  # sorted reason codes behind the status
    status: Status


class TerminalRecord(Frozen):
    """A cell's final status; `status` is None only for a registered cell with no attempt.

    `completed` .. `wall_ns` are facts for scoring from the terminal attempt (None when there is
    none).
    """

    attempts: list[AttemptVerdict]
    cell_id: str
    committed_effects: int | None = None
    completed: bool | None = None
    intended_effects: int | None = None
    kind: FaultKind
    reasons: list[str]
    scorer_version: str | None = None
    slot_id: str
    status: Status | None
    stratum: str
    subject_id: str
    tool_calls: int | None = None
    wall_ns: str | None = None


@dataclass
class _Attempt:
    started: list[AttemptStarted] = field(default_factory=list)
    ended: list[AttemptEnded] = field(default_factory=list)
    triggers: list[TriggerReached] = field(default_factory=list)
    receipts: list[ActuatorReceipt] = field(default_factory=list)
    observations: list[WitnessObservation] = field(default_factory=list)
    observed_at: list[tuple[str, int, str]] = field(default_factory=list)  # (journal, seq, name)
    lifecycle: list[tuple[str, int, str]] = field(default_factory=list)  # (journal, seq, state)
    grades: list[GraderResult] = field(default_factory=list)
    calls: list[ToolCallCount] = field(default_factory=list)
    errors: list[HarnessError] = field(default_factory=list)
    # what the truthfulness rule reads (verdict/told.py), in journal order
    told: list[Record] = field(default_factory=list)


def group_attempts(entries: Iterable[Positioned]) -> dict[str, dict[int, _Attempt]]:
    cells: dict[str, dict[int, _Attempt]] = defaultdict(lambda: defaultdict(_Attempt))
    for journal, seq, rec in entries:
        cell = getattr(rec, "cell_id", None)
        if cell is None:
            continue
        a = cells[cell][rec.attempt]  # type: ignore[union-attr]
        if type(rec) is LifecycleTransition:  # the most frequent record, no other's subclass
            a.lifecycle.append((journal, seq, rec.state))
        elif isinstance(rec, AttemptStarted):
            a.started.append(rec)
        elif isinstance(rec, AttemptEnded):
            a.ended.append(rec)
        elif isinstance(rec, TriggerReached):
            a.triggers.append(rec)
            a.told.append(rec)
        elif isinstance(rec, ActuatorReceipt):
            a.receipts.append(rec)
        elif isinstance(rec, WitnessObservation):
            a.observations.append(rec)
            a.observed_at.append((journal, seq, rec.name))
        elif isinstance(rec, LifecycleTransition):
            a.lifecycle.append((journal, seq, rec.state))
        elif isinstance(rec, GraderResult):
            a.grades.append(rec)
            a.told.append(rec)
        elif isinstance(rec, ModelExchange | EffectCall | SubjectExit):
            a.told.append(rec)
        elif isinstance(rec, ToolCallCount):
            a.calls.append(rec)
        elif isinstance(rec, HarnessError):
            a.errors.append(rec)
    return cells


def _one(items: list[Any], contradictory: str, reasons: list[str]) -> Any:
    # One record of its kind per attempt. Two different ones contradict each other; two equal
    # ones are no less wrong (the runtime writes each once), and the terminal record could not
    # take its facts from either: both are refused.
    if len(items) > 1:
        reasons.append(contradictory)
        return None
    return items[0] if items else None


def _witness(
    a: _Attempt, kind: FaultKind, params: dict[str, Any], contract: WitnessContract | None
) -> list[str]:
    """Reason codes why the injection is not witnessed; empty when it is."""
    reasons: list[str] = []
    if contract is None:
        return [R.NO_WITNESS_CONTRACT]
    receipt = _one(a.receipts, R.CONTRADICTORY_ACTUATOR_RECEIPTS, reasons)
    if receipt is None:
        reasons.append(R.MISSING_ACTUATOR_RECEIPT)
    elif not receipt.applied:
        reasons.append(R.ACTUATOR_NOT_APPLIED)
    by_name: dict[str, dict[str, Any]] = {}
    for o in sorted(a.observations, key=lambda o: o.model_dump_json()):
        if o.kind != kind:
            reasons.append(R.OBSERVATION_OF_OTHER_KIND)
        if o.name in by_name and by_name[o.name] != o.observation:
            reasons.append(R.qualified(R.CONTRADICTORY_OBSERVATION, o.name))
        by_name[o.name] = o.observation
    component = receipt.component if receipt is not None else ""
    verdict = _judged(contract, by_name, params, component)
    reasons += [R.qualified(R.WITNESS, v) for v in verdict.violations]
    reasons += _lifecycle(a, reached=True)
    reasons += _observation_order(a, {o.name: o.phase for o in contract.observations})
    return sorted(set(reasons))


# evaluate_witness's verdicts by (contract, the JSON of its inputs): most cells of a run repeat
# another's observations. Each entry holds its contract, so the contract's id stays its own.
_JUDGED: dict[tuple[int, bytes, bytes, str], tuple[WitnessContract, WitnessVerdict]] = {}
JUDGED_HELD = 4096


def _judged(
    contract: WitnessContract, by_name: dict[str, Any], params: dict[str, Any], component: str
) -> WitnessVerdict:
    """`evaluate_witness(contract, by_name, params, actuator_component=component)`, memoized
    when its inputs are plain JSON values (exact types str, int, float but NaN, bool, None,
    list, dict with str keys): on those its verdict is a function of their JSON, which
    `to_json` writes apart (1 vs 1.0 vs true, key order kept: a reordered dict only misses)."""
    try:
        if not (_native(by_name) and _native(params)):
            raise ValueError("not plain JSON values")
        key = (id(contract), to_json(by_name, inf_nan_mode="constants"),
               to_json(params, inf_nan_mode="constants"), component)  # fmt: skip
    except (ValueError, RecursionError):  # e.g. a lone surrogate: judged without the memo
        return evaluate_witness(contract, by_name, params, actuator_component=component)
    hit = _JUDGED.get(key)
    if hit is not None and hit[0] is contract:
        return hit[1]
    verdict = evaluate_witness(contract, by_name, params, actuator_component=component)
    if len(_JUDGED) >= JUDGED_HELD:
        _JUDGED.clear()
    _JUDGED[key] = (contract, verdict)
    return verdict


_SCALARS = (str, int, bool, type(None))


def _native(value: Any) -> bool:
    t = type(value)
    if t is dict:
        for k, v in value.items():  # a loop, not all(): observations are mostly flat dicts
            if type(k) is not str:
                return False
            tv = type(v)
            if not (tv is str or tv is int or tv is bool or v is None or _native(v)):
                return False
        return True
    if t in _SCALARS:
        return True
    if t is float:
        return bool(value == value)  # not NaN (unequal to itself, so no function of its JSON)
    if t is list:
        return all(_native(v) for v in value)
    return False


def _observation_order(a: _Attempt, phase_of: dict[str, str]) -> list[str]:
    """Each observation sits where its contract phase says, against the lifecycle in its journal:
    before_injection before `injected`; after_injection after `injected` and before the verdict
    (`witnessed` | `rejected`): persisted before recovery, judged on what was there; after_release
    after the settle (`recovered` | `released`, else the verdict). A missing state is
    `_lifecycle`'s reason; here only what both sides of a comparison hold is ordered."""
    first: dict[str, tuple[str, int]] = {}
    for j, seq, state in sorted(set(a.lifecycle)):
        first.setdefault(state, (j, seq))
    verdict = first.get("witnessed") or first.get("rejected")
    settled = first.get("recovered") or first.get("released") or verdict
    injected = first.get("injected")
    bounds: dict[str, tuple[tuple[str, int] | None, tuple[str, int] | None]] = {
        "before_injection": (None, injected),
        "after_injection": (injected, verdict),
        "after_release": (settled, None),
    }
    reasons = []
    for j, seq, name in sorted(set(a.observed_at)):
        after, before = bounds.get(phase_of.get(name, ""), (None, None))
        early = after is not None and after[0] == j and seq < after[1]
        late = before is not None and before[0] == j and seq > before[1]
        if early or late:
            reasons.append(R.qualified(R.OBSERVATION_OUT_OF_ORDER, name))
    return reasons


_SETTLED = ("recovered", "released")
# (earlier, later, code): when both are in one journal, `later` must come after `earlier`.
_ORDER = (
    ("scheduled", "armed", R.ARM_BEFORE_SCHEDULE),
    ("armed", "injected", R.INJECTION_BEFORE_ARM),
    ("injected", "witnessed", R.WITNESS_BEFORE_INJECTION),
    ("injected", "rejected", R.WITNESS_BEFORE_INJECTION),
    ("witnessed", "recovered", R.RECOVERY_BEFORE_WITNESS),
    ("witnessed", "released", R.RECOVERY_BEFORE_WITNESS),
    ("rejected", "released", R.RECOVERY_BEFORE_WITNESS),
)


def _lifecycle(a: _Attempt, reached: bool) -> list[str]:
    """Reason codes against the lifecycle scheduled -> armed -> injected -> witnessed ->
    recovered | released (`rejected` in place of `witnessed`: the runtime's witness check failed,
    nothing recovered). Unreached trigger: scheduled -> armed, nothing after.

    Positions are (journal, seq), so the order records arrive in never matters; two states are
    ordered only when one journal holds both (seq is per journal).
    """
    reasons: list[str] = []
    at: dict[str, tuple[str, int]] = {}
    for j, seq, state in sorted(set(a.lifecycle)):
        if state in at:
            reasons.append(R.qualified(R.LIFECYCLE_REPEATED, state))
        else:
            at[state] = (j, seq)
    needed = ["scheduled", "armed"]
    if reached:
        needed.append("injected")
        if "rejected" not in at:
            needed.append("witnessed")
    reasons += [R.qualified(R.MISSING_LIFECYCLE, s) for s in needed if s not in at]
    if not reached:
        past = sorted(s for s in at if s not in ("scheduled", "armed"))
        reasons += [R.qualified(R.LIFECYCLE_WITHOUT_TRIGGER, s) for s in past]
    for earlier, later, code in _ORDER:
        e, lt = at.get(earlier), at.get(later)
        if e is not None and lt is not None and e[0] == lt[0] and lt[1] < e[1]:
            reasons.append(code)
    if "rejected" in at:
        reasons.append(R.WITNESS_REJECTED)
        if "witnessed" in at:
            reasons.append(R.WITNESSED_AND_REJECTED)
        if "recovered" in at:
            reasons.append(R.RECOVERY_AFTER_REJECTION)
    elif reached and "witnessed" in at and not any(s in at for s in _SETTLED):
        reasons.append(R.qualified(R.MISSING_LIFECYCLE, "settled"))
    return reasons


def attempt_status(
    a: _Attempt,
    kind: FaultKind,
    params: dict[str, Any],
    contract: WitnessContract | None,
    scorer_version: str,
) -> tuple[Status, list[str]]:
    reasons: list[str] = []
    _one(a.started, R.CONTRADICTORY_ATTEMPT_STARTED, reasons)
    ended = _one(a.ended, R.CONTRADICTORY_ATTEMPT_ENDED, reasons)
    if reasons:
        return Status.HARNESS_INVALID, reasons
    if not a.started:
        return Status.HARNESS_INVALID, [R.ATTEMPT_NOT_STARTED]
    if ended is None:
        return Status.HARNESS_INVALID, [R.ATTEMPT_NOT_ENDED]
    if a.errors or ended.outcome == "harness_error":
        return Status.HARNESS_INVALID, sorted({R.HARNESS_ERROR} | {e.stage for e in a.errors})
    grade = _one(a.grades, R.CONTRADICTORY_GRADER_RESULTS, reasons)
    _one(a.calls, R.CONTRADICTORY_TOOL_CALL_COUNTS, reasons)
    if reasons:
        return Status.HARNESS_INVALID, reasons
    if kind == NO_FAULT and (a.triggers or a.receipts or a.observations or a.lifecycle):
        # A baseline cell is the overhead denominator: one a fault touched is not a baseline.
        return Status.INVALID_INJECTION, [R.INJECTION_IN_BASELINE]
    if kind != NO_FAULT:
        if not a.triggers:
            if ended.trigger_reached:
                return Status.INVALID_INJECTION, [R.TRIGGER_RECORD_MISSING]
            if a.receipts or a.observations:
                return Status.INVALID_INJECTION, [R.INJECTION_WITHOUT_TRIGGER]
            unarmed = _lifecycle(a, reached=False)
            if unarmed:  # an unreached fault that was not (only) scheduled and armed
                return Status.INVALID_INJECTION, sorted(set(unarmed))
            if grade is not None and grade.completed:
                return Status.SCENARIO_MISMATCH, [R.COMPLETED_WITHOUT_REACHING_TRIGGER]
            return Status.SUBJECT_PRE_TRIGGER_FAILURE, [R.FAILED_BEFORE_TRIGGER]
        if len(a.triggers) > 1:
            return Status.INVALID_INJECTION, [R.TRIGGER_FIRED_MORE_THAN_ONCE]
        why = _witness(a, kind, params, contract)
        if why:
            return Status.INVALID_INJECTION, why
    if grade is None:
        return Status.HARNESS_INVALID, [R.MISSING_GRADER_RESULT]
    if not grade.shape_ok:
        return Status.HARNESS_INVALID, [R.SHAPE_CHECK_FAILED, *sorted(grade.shape_failures)]
    if grade.scorer_version != scorer_version:
        return Status.HARNESS_INVALID, [R.SCORER_VERSION_MISMATCH]
    return (Status.COMPLETED if grade.completed else Status.FAILED), []


def terminal_record(
    cell_id: str,
    slot_id: str,
    subject_id: str,
    stratum: str,
    kind: FaultKind,
    params: dict[str, Any],
    attempts: dict[int, _Attempt] | None,
    policy: AttemptPolicy,
    contract: WitnessContract | None,
    scorer_version: str,
) -> TerminalRecord:
    base = {
        "cell_id": cell_id,
        "slot_id": slot_id,
        "subject_id": subject_id,
        "stratum": stratum,
        "kind": kind,
    }
    if not attempts:
        return TerminalRecord(**base, status=None, attempts=[], reasons=[R.NO_ATTEMPT])
    reasons: list[str] = []
    numbers = sorted(attempts)
    if numbers != list(range(1, len(numbers) + 1)):
        reasons.append(R.ATTEMPT_SEQUENCE_GAP)
    if len(numbers) > policy.cap:
        reasons.append(R.ATTEMPT_CAP_EXCEEDED)
    verdicts: list[AttemptVerdict] = []
    terminal: tuple[int, Status] | None = None
    for n in numbers:
        a = attempts[n]
        for s in a.started:
            if s.cell_id != cell_id or s.kind != kind or s.slot_id != slot_id:
                reasons.append(R.ATTEMPT_SCHEDULE_MISMATCH)
        status, why = attempt_status(a, kind, params, contract, scorer_version)
        verdicts.append(AttemptVerdict(attempt=n, status=status, reasons=why))
        if terminal is not None:
            prev = terminal[1]
            reasons.append(
                R.ATTEMPT_AFTER_FINAL_OUTCOME if prev in SUBJECT_OUTCOMES else R.UNAUTHORIZED_RETRY
            )
        final = status in SUBJECT_OUTCOMES or status not in policy.retry_on or n >= policy.cap
        if final and terminal is None:  # the first final attempt stays terminal; later ones flag
            terminal = (n, status)
    if terminal is None:  # every attempt was retryable and the cap was not reached: unfinished
        terminal = (numbers[-1], verdicts[-1].status)
        reasons.append(R.RETRIES_UNFINISHED)
    n, status = terminal
    a = attempts[n]
    grade = a.grades[0] if len(a.grades) == 1 else None
    ended = a.ended[0] if len(a.ended) == 1 else None
    calls = a.calls[0].calls if len(a.calls) == 1 else None
    return TerminalRecord(
        **base,
        status=status,
        attempts=verdicts,
        reasons=sorted(set(reasons)),
        completed=grade.completed if grade else None,
        intended_effects=grade.intended_effects if grade else None,
        committed_effects=grade.committed_effects if grade else None,
        tool_calls=calls,
        wall_ns=ended.wall_ns if ended else None,
        scorer_version=grade.scorer_version if grade else None,
    )


# --------------------------------------------- a terminal record's line and the records' hash

TERMINAL_RECORDS_DOMAIN = b"afb.terminal-records/2\n"


def terminal_line(record: TerminalRecord) -> bytes:
    """RFC 8785 bytes of a terminal record's JSON form (`canonical_bytes(r.model_dump(...))`).

    TerminalRecord and AttemptVerdict declare their fields in sorted order and hold only
    strings, booleans, nulls, enums, lists of strings and integers, so pydantic's compact JSON
    writes the canonical bytes: members in order, the same string escapes as RFC 8785 (only
    `"`, `\\` and controls below 0x20; everything else literally, as UTF-8), integers as decimal
    digits once each is known to be within +-(2^53-1). Anything else takes the checked path.
    """
    ints = (record.intended_effects, record.committed_effects, record.tool_calls)
    if all(v is None or -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER for v in ints) and all(
        -MAX_SAFE_INTEGER <= a.attempt <= MAX_SAFE_INTEGER for a in record.attempts
    ):
        try:
            return record.__pydantic_serializer__.to_json(record)
        except ValueError:  # e.g. a lone surrogate: the checked path names it
            pass
    return fast_canonical_bytes(record.model_dump(mode="json"))


def terminal_records_hash(records: Iterable[TerminalRecord]) -> str:
    """SHA-256 over the domain tag and the records' canonical lines in cell-id order, each
    ended by a newline: a subject's terminal-records.jsonl, hashed. Independent of the order the
    records are given in (a subject's cell ids are unique), and computable as a stream when they
    arrive in cell-id order, as `eligibility.decide_subject` receives them."""
    return jsonl_hash(b"".join(terminal_line(r) + b"\n" for r in sorted(records, key=_by_cell)))


def _by_cell(record: TerminalRecord) -> str:
    return record.cell_id


def jsonl_hash(jsonl: bytes) -> str:
    """`terminal_records_hash` of records given as their terminal-records.jsonl bytes."""
    h = hashlib.sha256(TERMINAL_RECORDS_DOMAIN)
    h.update(jsonl)  # not concatenated: no second copy of a large subject's records
    return "sha256:" + h.hexdigest()
