"""The publication boundary's documents: IncompleteEvidenceReport | PublishableScorecard.

An incomplete report has no score, rate, rank, percentile or bound field anywhere in its schema,
and it seals subject outcomes (it says an outcome was recorded, not which), so no success count
of an ineligible subject leaves the evaluator. A scorecard holds only an eligible, correctly
sealed proof: its validator re-checks that on every construction path. build.py builds both.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from runner.evaluator.core.canonical import fast_digest
from runner.evaluator.core.types import Digest, Frozen, Status
from runner.evaluator.protocol.faultkinds import FaultKind
from runner.evaluator.protocol.spec import Comparison as ComparisonRules
from runner.evaluator.protocol.spec import Measure
from runner.evaluator.verdict.eligibility import EligibilityProof

from .stats import Interval

REPORT_SCHEMA = "afb.report/2"
SCORECARD_SCHEMA = "afb.scorecard/3"
CELL_SCORES_FILE = "cell-scores.jsonl"
CELL_HISTORY_FILE = "cell-history.jsonl"

# A cell's evidence state in a report: its status, except that a subject outcome is sealed.
SEALED = "SUBJECT_OUTCOME_SEALED"
MISSING = "MISSING"


class RowsFile(Frozen):
    """Per-cell rows kept beside the document (one canonical JSON object per line, cell-id
    order), bound to it by their SHA-256 and line count: at a million cells the rows are the
    bulk of the bytes, and the document stays small enough to read."""

    file: str
    lines: int
    sha256: Digest


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

    schema_version: Literal["afb.report/2"] = Field(default="afb.report/2", alias="schema")
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
    cells_not_witnessed: list[CellHistory] = Field(
        description="the history of every cell whose evidence state is not SUBJECT_OUTCOME_SEALED"
    )
    cell_history: RowsFile = Field(description="every registered cell's CellHistory row")
    artifacts: list[str]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _rows_file_is_the_history(self) -> IncompleteEvidenceReport:
        if self.cell_history.file != CELL_HISTORY_FILE:
            raise ValueError(f"cell_history must name {CELL_HISTORY_FILE}")
        if self.cell_history.lines != self.registered_cells:
            raise ValueError("the cell history must hold every registered cell")
        return self


# --------------------------------------------------------------------------------- scorecard


def absent_when_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Fields added by issue 25 are left out when unset, so a scorecard written before them
    dumps (and hashes) exactly as it was written."""
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


class Ratio(Frozen):
    numerator: int
    denominator: int
    value: float  # numerator / denominator, rounded to 6 places; the integers are authoritative
    interval: Interval | None = Field(
        default=None,
        description="95 % interval (publish/stats.py): exact Clopper-Pearson for a rate, a "
        "task-clustered bootstrap for a mean; absent where none is defined",
    )

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return absent_when_none(handler(self), ("interval",))


class Completion(Frozen):
    """Over every cell of the group: a pre-trigger failure (and a scenario mismatch) is a cell
    that did not complete."""

    completed: int
    cells: int
    pre_trigger_failures: int  # faulted cells whose subject failed before the trigger
    rate: Ratio | None


class DuplicateEffects(Frozen):
    """Over the exposed cells only: faulted cells whose fault was witnessed (COMPLETED or
    FAILED). A cell that never saw its fault says nothing about replaying an effect."""

    exposed_cells: int
    duplicate_effects: int  # sum over exposed cells of committed - intended, where positive
    cells_with_duplicates: int
    share_without_duplicates: Ratio | None  # (exposed - with duplicates) / exposed
    duplicate_rate: Ratio | None = Field(
        default=None,
        description="cells_with_duplicates / exposed_cells with its interval: at 0/n the exact "
        "one-sided upper bound (0/64 -> at most 0.046)",
    )

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return absent_when_none(handler(self), ("duplicate_rate",))


class RecoveryOverhead(Frozen):
    """Over the recovered cells only: exposed cells that COMPLETED, each paired with the
    COMPLETED baseline of the same task and seed. A failed or pre-trigger cell recovered nothing,
    so it cannot make recovery look cheap."""

    pairs: int
    missing_baseline: int  # recovered cells without a completed baseline
    unrecovered: int  # exposed cells that did not complete (FAILED)
    extra_tool_calls_total: int | None
    extra_tool_calls_mean: Ratio | None
    wall_time_ratio_median: float | None  # measured, not deterministic across runs
    wall_time_ratio_median_interval: Interval | None = Field(
        default=None,
        description="exact distribution-free 95 % interval for the median task's median ratio; "
        "absent below 6 tasks (no pair of order statistics reaches 95 %)",
    )

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return absent_when_none(handler(self), ("wall_time_ratio_median_interval",))


class Measures(Frozen):
    """A group's measures: exactly the scorecard's `measures` are present; an unlisted measure
    is absent (never zero). recovery_overhead is null for a group without faulted cells."""

    completion: Completion | None = None
    duplicate_effects: DuplicateEffects | None = None
    recovery_overhead: RecoveryOverhead | None = None

    @model_serializer(mode="wrap")
    def _only_measured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}


class CellScore(Frozen):
    cell_id: str
    stratum: str
    status: Status
    duplicate_effects: int  # the cell's own count; measures count it only when exposed
    exposed: bool  # a faulted cell whose fault was witnessed
    extra_tool_calls: int | None  # recovered cells with their baseline only; never coerced to 0
    wall_time_ratio: float | None
    # What a paired comparison pairs on (the slot: same task, fault, seed, replicate), what it
    # clusters on (the task), and whether a retry decided the cell. None in older rows.
    slot_id: str | None = None
    task_id: str | None = None
    attempts: int | None = None


# ------------------------------------------------------------- retries and replicates (issue 25)


class AttemptGroup(Frozen):
    cells: int
    completed: int
    rate: Ratio | None


class RetrySplit(Frozen):
    """Cells decided on their first attempt apart from cells decided after a retry (an
    INVALID_INJECTION or HARNESS_INVALID attempt before): a retry that lands on an easier
    outcome shows as a different rate here."""

    first_attempt: AttemptGroup
    after_retry: AttemptGroup


class Retries(Frozen):
    overall: RetrySplit
    strata: dict[str, RetrySplit]


class ReplicateSummary(Frozen):
    """[matrix] replicates = k > 1: every (task, fault, seed) group run k times. A group passes
    when all k replicates COMPLETED without a duplicate effect (pass^k); it flips when its
    replicates disagree on that verdict. A deterministic subject must flip in no group."""

    replicates: int
    groups: int
    pass_all: Ratio | None = Field(description="pass^k: groups whose every replicate passed")
    flipped: Ratio | None = Field(description="groups whose replicates disagree")
    verdict_variance_mean: float | None = Field(
        description="mean over groups of the variance of the pass verdict (0/1) across "
        "its replicates"
    )


class TruthMeasures(Frozen):
    """What the framework told its model about exposed irreversible calls, and who duplicated
    (issue 23; rule: runner/evaluator/publish/truthfulness.py, docs/SUBJECTS.md)."""

    exposed_irreversible_cells: int = Field(
        ge=0, description="exposed cells whose fault hit an irreversible tool's call"
    )
    told: dict[str, int] = Field(
        description="told_committed | told_failed | told_unknown | omitted | no_next_call"
    )
    join: dict[str, int] = Field(description="truthful | misleading | silent (told x ledger)")
    truthful: Ratio | None = Field(description="truthful / exposed_irreversible_cells")
    duplicate_effects: int = Field(ge=0, description="duplicate effects of the exposed cells")
    attribution: dict[str, int] = Field(
        description="model_requested | framework_retried | restart_replayed | unattributed"
    )
    framework_duplicates: int = Field(
        ge=0, description="the framework's: retried + replayed (+ model_requested if careful)"
    )


class Truthfulness(Frozen):
    rule_version: str
    model: bool = Field(description="the subject talks to a model through the model proxy")
    model_policy: str | None = Field(description="[subjects.config.model] policy, if declared")
    statement: str
    overall: TruthMeasures
    strata: dict[str, TruthMeasures]


class PublishableScorecard(Frozen):
    schema_version: Literal["afb.scorecard/3"] = Field(default="afb.scorecard/3", alias="schema")
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
    measures: list[Measure] = Field(description="set: [scoring].measures, the ones carried")
    comparison_rules: ComparisonRules = Field(
        description="the protocol's [comparison] rules, applied by every comparison of this card"
    )
    scenario_mismatch_strata: list[str] = Field(
        description="strata with a SCENARIO_MISMATCH cell: published, never compared"
    )
    overall: Measures
    strata: dict[str, Measures]
    cell_scores: RowsFile = Field(description="every registered cell's CellScore row")
    derived_from: Digest | None = Field(
        default=None, description="the scorecard this one re-grades (bench regrade)"
    )
    subject_role: Literal["oracle", "agent"] | None = Field(
        default=None,
        description="oracle: a reference subject given the known answer (it validates the "
        "benchmark); agent: given the agent view only. None: a scorecard made before roles",
    )

    truthfulness: Truthfulness | None = Field(
        default=None, description="what the framework told its model, who duplicated (issue 23)"
    )
    retries: Retries | None = Field(
        default=None, description="cells decided on the first attempt vs after a retry"
    )
    replicates: ReplicateSummary | None = Field(
        default=None, description="pass^k and verdict flips; only when [matrix] replicates > 1"
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return absent_when_none(handler(self), ("truthfulness", "retries", "replicates"))

    @model_validator(mode="after")
    def _only_from_an_eligible_proof(self) -> PublishableScorecard:
        p = self.proof
        if p.decision != "eligible" or p.reason_codes:
            raise ValueError("a scorecard can only be built from an eligible proof")
        if not p.hash_is_valid() or p.proof_hash != self.proof_hash:
            raise ValueError("the embedded proof's hash does not verify")
        if p.protocol_status != "frozen":
            raise ValueError("a scorecard can only be built under a frozen protocol")
        if self.scenario_mismatch_strata != p.scenario_mismatch_strata:
            raise ValueError("scenario_mismatch_strata differs from the proof's")
        if self.measures != sorted(set(self.measures)):
            raise ValueError("measures is a set: sorted, without duplicates")
        for name, m in [("overall", self.overall), *self.strata.items()]:
            if m.model_fields_set != set(self.measures):
                raise ValueError(f"{name} must carry exactly the measures {self.measures}")
            if None in (getattr(m, k) for k in self.measures if k != "recovery_overhead"):
                raise ValueError(f"{name}: a carried measure is never null")
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
        if self.cell_scores.lines != p.coverage.registered:
            raise ValueError("a scorecard must score every registered cell")
        if self.cell_scores.file != CELL_SCORES_FILE:
            raise ValueError(f"cell_scores must name {CELL_SCORES_FILE}")
        return self

    @classmethod
    def model_construct(  # type: ignore[override]  # deliberately unusable
        cls, _fields_set: set[str] | None = None, **values: Any
    ) -> Self:
        raise TypeError("PublishableScorecard cannot skip validation; use build_scorecard")

    def scorecard_hash(self) -> str:
        return fast_digest(self.model_dump(mode="json", by_alias=True))
