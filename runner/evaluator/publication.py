"""The publication boundary: IncompleteEvidenceReport | PublishableScorecard, decided here.

An incomplete report has no score, rate, rank, percentile or bound field anywhere in its schema,
and it seals subject outcomes (it says an outcome was recorded, not which), so no success count
of an ineligible subject leaves the evaluator. A scorecard can be built only from an eligible,
correctly sealed proof; its validator re-checks that on every construction path.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .eligibility import EligibilityProof, SubjectEvaluation, terminal_records_hash
from .journal import fast_digest
from .matrix import Slot
from .outcomes import SUBJECT_OUTCOMES, TerminalRecord
from .spec import FaultKind, Status

REPORT_SCHEMA = "afb.report/1"
SCORECARD_SCHEMA = "afb.scorecard/1"


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------- incomplete evidence


class AttemptEntry(Frozen):
    attempt: int
    status: Literal[
        "SUBJECT_OUTCOME_SEALED", "SCENARIO_MISMATCH", "INVALID_INJECTION", "HARNESS_INVALID"
    ]
    reasons: list[str]


class CellHistory(Frozen):
    cell_id: str
    stratum: str
    kind: FaultKind
    state: Literal[
        "SUBJECT_OUTCOME_SEALED",
        "SCENARIO_MISMATCH",
        "INVALID_INJECTION",
        "HARNESS_INVALID",
        "MISSING",
    ]
    attempts: list[AttemptEntry]
    reasons: list[str]


class StratumEvidence(Frozen):
    registered_cells: int
    witnessed_cells: int
    missing_cells: int
    blocked: bool


class IncompleteEvidenceReport(Frozen):
    """Evidence only. Counts describe evidence coverage, never subject performance."""

    schema_version: Literal["afb.report/1"] = Field(default="afb.report/1", alias="schema")
    kind: Literal["incomplete_evidence"] = "incomplete_evidence"
    subject_id: str
    subject_config_hash: str
    protocol_id: str
    protocol_hash: str
    policy_hash: str
    evaluator_digest: str
    evidence_root_hash: str
    proof_hash: str
    decision: Literal["ineligible"] = "ineligible"
    reason_codes: list[str]
    registered_cells: int
    witnessed_cells: int
    status_counts: dict[str, int] = Field(
        description="evidence states: SUBJECT_OUTCOME_SEALED, SCENARIO_MISMATCH, "
        "INVALID_INJECTION, HARNESS_INVALID, MISSING"
    )
    strata: dict[str, StratumEvidence]
    missing_cell_ids: list[str]
    blocked_strata: list[str]
    not_comparable_strata: list[str]
    cells: list[CellHistory]
    artifacts: list[str]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _sealed(status: Status | None) -> str:
    if status is None:
        return "MISSING"
    if status in SUBJECT_OUTCOMES and status is not Status.SCENARIO_MISMATCH:
        return "SUBJECT_OUTCOME_SEALED"
    return status.value


def incomplete_report(ev: SubjectEvaluation, artifacts: list[str]) -> IncompleteEvidenceReport:
    p = ev.proof
    if p.decision != "ineligible" or not p.hash_is_valid():
        raise ValueError("an incomplete-evidence report needs a valid ineligible proof")
    counts: dict[str, int] = defaultdict(int)
    strata: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    cells = []
    for t in ev.terminal_records:
        state = _sealed(t.status)
        counts[state] += 1
        strata[t.stratum][0] += 1
        strata[t.stratum][1] += state == "SUBJECT_OUTCOME_SEALED"
        strata[t.stratum][2] += state == "MISSING"
        cells.append(
            CellHistory(
                cell_id=t.cell_id,
                stratum=t.stratum,
                kind=t.kind,
                state=state,
                attempts=[
                    AttemptEntry(
                        attempt=a.attempt,
                        status=_sealed(a.status),
                        reasons=[] if _sealed(a.status) == "SUBJECT_OUTCOME_SEALED" else a.reasons,
                    )
                    for a in t.attempts
                ],
                reasons=t.reasons,
            )
        )
    blocked = sorted(
        s
        for s, (reg, wit, _) in strata.items()
        if wit * 100 < p.coverage.floor_percent * reg or s in p.not_comparable_strata
    )
    return IncompleteEvidenceReport(
        subject_id=p.subject_id,
        subject_config_hash=p.subject_config_hash,
        protocol_id=p.protocol_id,
        protocol_hash=p.protocol_hash,
        policy_hash=p.policy_hash,
        evaluator_digest=p.evaluator_digest,
        evidence_root_hash=p.evidence_root_hash,
        proof_hash=p.proof_hash,
        reason_codes=p.reason_codes,
        registered_cells=p.coverage.registered,
        witnessed_cells=p.coverage.witnessed,
        status_counts=dict(sorted(counts.items())),
        strata={
            s: StratumEvidence(
                registered_cells=r, witnessed_cells=w, missing_cells=m, blocked=s in blocked
            )
            for s, (r, w, m) in sorted(strata.items())
        },
        missing_cell_ids=sorted(t.cell_id for t in ev.terminal_records if t.status is None),
        blocked_strata=blocked,
        not_comparable_strata=p.not_comparable_strata,
        cells=cells,
        artifacts=sorted(artifacts),
    )


# --------------------------------------------------------------------------------- scorecard


class Ratio(Frozen):
    numerator: int
    denominator: int
    value: float  # numerator / denominator, rounded to 6 places; the integers are authoritative


def ratio(n: int, d: int) -> Ratio | None:
    return Ratio(numerator=n, denominator=d, value=round(n / d, 6)) if d else None


class Completion(Frozen):
    completed: int
    cells: int
    rate: Ratio | None


class DuplicateEffects(Frozen):
    duplicate_effects: int  # sum over cells of committed - intended, where positive
    cells_with_duplicates: int
    share_without_duplicates: Ratio | None


class RecoveryOverhead(Frozen):
    pairs: int
    missing_baseline: int
    extra_tool_calls_total: int | None
    extra_tool_calls_mean: Ratio | None
    wall_time_ratio_median: float | None  # measured, not deterministic across runs


class Measures(Frozen):
    completion: Completion
    duplicate_effects: DuplicateEffects
    recovery_overhead: RecoveryOverhead | None  # None for baseline strata


class CellScore(Frozen):
    cell_id: str
    stratum: str
    status: Status
    duplicate_effects: int
    extra_tool_calls: int | None  # null when the baseline is missing, never coerced to 0
    wall_time_ratio: float | None


class PublishableScorecard(Frozen):
    schema_version: Literal["afb.scorecard/1"] = Field(default="afb.scorecard/1", alias="schema")
    kind: Literal["publishable_scorecard"] = "publishable_scorecard"
    subject_id: str
    subject_config_hash: str
    protocol_id: str
    protocol_hash: str
    policy_hash: str
    evaluator_digest: str
    evidence_root_hash: str
    cell_set_hash: str
    environment_conformance: str | None
    execution_environment_hash: str | None
    proof_hash: str
    proof: EligibilityProof
    scorer_version: str
    overall: Measures
    strata: dict[str, Measures]
    cells: list[CellScore]
    derived_from: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _only_from_an_eligible_proof(self) -> PublishableScorecard:
        p = self.proof
        if p.decision != "eligible" or p.reason_codes:
            raise ValueError("a scorecard can only be built from an eligible proof")
        if not p.hash_is_valid() or p.proof_hash != self.proof_hash:
            raise ValueError("the embedded proof's hash does not verify")
        for name in (
            "subject_id",
            "subject_config_hash",
            "protocol_id",
            "protocol_hash",
            "policy_hash",
            "evaluator_digest",
            "evidence_root_hash",
            "cell_set_hash",
            "environment_conformance",
            "execution_environment_hash",
        ):
            if getattr(self, name) != getattr(p, name):
                raise ValueError(f"{name} differs from the proof's")
        if len(self.cells) != p.coverage.registered:
            raise ValueError("a scorecard must score every registered cell")
        return self

    @classmethod
    def model_construct(  # type: ignore[override]  # deliberately unusable
        cls, _fields_set: set[str] | None = None, **values: Any
    ) -> Self:
        raise TypeError("PublishableScorecard cannot skip validation; use build_scorecard")

    def scorecard_hash(self) -> str:
        return fast_digest(self.model_dump(mode="json", by_alias=True))


def _measures(cells: list[CellScore], faulted: bool) -> Measures:
    completed = sum(c.status is Status.COMPLETED for c in cells)
    dup_cells = sum(c.duplicate_effects > 0 for c in cells)
    overhead = None
    if faulted:
        paired = [c for c in cells if c.extra_tool_calls is not None]
        ratios = [c.wall_time_ratio for c in paired if c.wall_time_ratio is not None]
        extra = [c.extra_tool_calls for c in paired if c.extra_tool_calls is not None]
        overhead = RecoveryOverhead(
            pairs=len(paired),
            missing_baseline=len(cells) - len(paired),
            extra_tool_calls_total=sum(extra) if paired else None,
            extra_tool_calls_mean=ratio(sum(extra), len(paired)),
            wall_time_ratio_median=round(statistics.median(ratios), 4) if ratios else None,
        )
    return Measures(
        completion=Completion(
            completed=completed, cells=len(cells), rate=ratio(completed, len(cells))
        ),
        duplicate_effects=DuplicateEffects(
            duplicate_effects=sum(c.duplicate_effects for c in cells),
            cells_with_duplicates=dup_cells,
            share_without_duplicates=ratio(len(cells) - dup_cells, len(cells)),
        ),
        recovery_overhead=overhead,
    )


def build_scorecard(ev: SubjectEvaluation, slots: list[Slot]) -> PublishableScorecard:
    """The only constructor callers should use; the model re-validates the proof anyway."""
    p = ev.proof
    if p.decision != "eligible" or p.reason_codes or not p.hash_is_valid():
        raise ValueError("a scorecard can only be built from an eligible proof")
    if terminal_records_hash(ev.terminal_records) != p.terminal_records_hash:
        raise ValueError("terminal records do not match the proof")
    index = {s.slot_id: s for s in slots}
    baselines: dict[tuple[str, int], TerminalRecord] = {}
    for t in ev.terminal_records:
        s = index[t.slot_id]
        if s.schedule.kind is FaultKind.NONE and t.status is Status.COMPLETED:
            baselines[(s.task_id, s.seed)] = t
    cells: list[CellScore] = []
    by_stratum: dict[str, list[CellScore]] = defaultdict(list)
    kinds: dict[str, FaultKind] = {}
    for t in ev.terminal_records:
        assert t.status is not None
        s = index[t.slot_id]
        base = baselines.get((s.task_id, s.seed)) if t.kind is not FaultKind.NONE else None
        extra = ratio_w = None
        if base is not None and t.tool_calls is not None and base.tool_calls is not None:
            extra = t.tool_calls - base.tool_calls
        if base is not None and t.wall_ns and base.wall_ns and int(base.wall_ns) > 0:
            ratio_w = round(int(t.wall_ns) / int(base.wall_ns), 4)
        dup = max(0, (t.committed_effects or 0) - (t.intended_effects or 0))
        c = CellScore(
            cell_id=t.cell_id,
            stratum=t.stratum,
            status=t.status,
            duplicate_effects=dup,
            extra_tool_calls=extra,
            wall_time_ratio=ratio_w,
        )
        cells.append(c)
        by_stratum[t.stratum].append(c)
        kinds[t.stratum] = t.kind
    faulted = [c for c in cells if kinds[c.stratum] is not FaultKind.NONE]
    overall = _measures(cells, faulted=False).model_copy(
        update={"recovery_overhead": _measures(faulted, faulted=True).recovery_overhead}
    )
    spec_scorer = {t.scorer_version for t in ev.terminal_records if t.scorer_version}
    return PublishableScorecard(
        subject_id=p.subject_id,
        subject_config_hash=p.subject_config_hash,
        protocol_id=p.protocol_id,
        protocol_hash=p.protocol_hash,
        policy_hash=p.policy_hash,
        evaluator_digest=p.evaluator_digest,
        evidence_root_hash=p.evidence_root_hash,
        cell_set_hash=p.cell_set_hash,
        environment_conformance=p.environment_conformance,
        execution_environment_hash=p.execution_environment_hash,
        proof_hash=p.proof_hash,
        proof=p,
        scorer_version=",".join(sorted(spec_scorer)),
        overall=overall,
        strata={
            s: _measures(cs, faulted=kinds[s] is not FaultKind.NONE)
            for s, cs in sorted(by_stratum.items())
        },
        cells=cells,
    )
