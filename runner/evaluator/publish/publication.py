"""The publication boundary: IncompleteEvidenceReport | PublishableScorecard, decided here.

An incomplete report has no score, rate, rank, percentile or bound field anywhere in its schema,
and it seals subject outcomes (it says an outcome was recorded, not which), so no success count
of an ineligible subject leaves the evaluator. A scorecard can be built only from an eligible,
correctly sealed proof; its validator re-checks that on every construction path.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Self

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, model_validator

from runner.evaluator.core.canonical import MAX_SAFE_INTEGER, fast_canonical_bytes, fast_digest
from runner.evaluator.core.types import Status
from runner.evaluator.protocol.faultkinds import NO_FAULT, FaultKind
from runner.evaluator.protocol.matrix import Slot
from runner.evaluator.verdict.eligibility import EligibilityProof, SubjectEvaluation, jsonl_hash
from runner.evaluator.verdict.outcomes import SUBJECT_OUTCOMES

REPORT_SCHEMA = "afb.report/2"
SCORECARD_SCHEMA = "afb.scorecard/2"
CELL_SCORES_FILE = "cell-scores.jsonl"
CELL_HISTORY_FILE = "cell-history.jsonl"

Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RowsFile(Frozen):
    """Per-cell rows kept beside the document (one canonical JSON object per line, cell-id
    order), bound to it by their SHA-256 and line count: at a million cells the rows are the
    bulk of the bytes, and the document stays small enough to read."""

    file: str
    lines: int
    sha256: Digest


def _parse(line: bytes) -> Any:
    """A terminal line as plain JSON: they are the evaluator's own canonical TerminalRecord JSON
    (eligibility.terminal_line), so their values are in the domain `_row_bytes` relies on."""
    return pydantic_core.from_json(line)


def _row_bytes(row: dict[str, Any]) -> bytes:
    """RFC 8785 bytes of a row built from a terminal line's values, with its members (and those
    of every object inside it) inserted in sorted key order.

    pydantic's JSON keeps insertion order and writes strings as RFC 8785 does (see
    eligibility.terminal_line). The row's strings and integers come from canonical lines (valid
    UTF-8, within +-(2^53-1)); a top-level float is written directly when it is non-integral
    within 1e-4 <= |v| < 1e16 (the same shortest digits as RFC 8785 there; property-tested),
    as an integer when integral and safe. Anything else takes the checked path.
    """
    for k, v in row.items():
        if type(v) is float:
            if v.is_integer():
                if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                    return fast_canonical_bytes(row)
                row[k] = int(v)  # RFC 8785 writes an integral number without ".0"
            elif not 1e-4 <= abs(v) < 1e16:
                return fast_canonical_bytes(row)
        elif type(v) is int and not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
            return fast_canonical_bytes(row)
    try:
        return pydantic_core.to_json(row)
    except ValueError:  # not serializable as given (e.g. a lone surrogate): the checked path
        return fast_canonical_bytes(row)


def _rows_file(name: str, data: bytes, lines: int) -> RowsFile:
    return RowsFile(file=name, lines=lines, sha256="sha256:" + hashlib.sha256(data).hexdigest())


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


_SEALED = "SUBJECT_OUTCOME_SEALED"


def _attempt_entry(a: dict[str, Any]) -> dict[str, Any]:
    """An AttemptEntry row (sorted keys): a sealed outcome keeps no reasons, it says nothing."""
    state = _sealed(Status(a["status"]))
    reasons = [] if state == _SEALED else a["reasons"]
    return {"attempt": a["attempt"], "reasons": reasons, "status": state}


def _sealed(status: Status | None) -> str:
    if status is None:
        return "MISSING"
    if status in SUBJECT_OUTCOMES and status is not Status.SCENARIO_MISMATCH:
        return "SUBJECT_OUTCOME_SEALED"
    return status.value


def incomplete_report(
    ev: SubjectEvaluation, artifacts: list[str]
) -> tuple[IncompleteEvidenceReport, bytes]:
    """The report and its cell-history rows (CELL_HISTORY_FILE's bytes), in one pass."""
    p = ev.proof
    if p.decision != "ineligible" or not p.hash_is_valid():
        raise ValueError("an incomplete-evidence report needs a valid ineligible proof")
    if jsonl_hash(ev.terminal_jsonl) != p.terminal_records_hash:
        raise ValueError("terminal records do not match the proof")
    counts: dict[str, int] = defaultdict(int)
    strata: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    rows: list[bytes] = []
    not_witnessed: list[CellHistory] = []
    missing: list[str] = []
    for line in ev.terminal_lines():
        t = _parse(line)
        state = _sealed(None if t["status"] is None else Status(t["status"]))
        counts[state] += 1
        n = strata[t["stratum"]]
        n[0] += 1
        n[1] += state == "SUBJECT_OUTCOME_SEALED"
        n[2] += state == "MISSING"
        history = {  # members in sorted key order (see _row_bytes)
            "attempts": [_attempt_entry(a) for a in t["attempts"]],
            "cell_id": t["cell_id"],
            "kind": t["kind"],
            "reasons": t["reasons"],
            "state": state,
            "stratum": t["stratum"],
        }
        rows.append(_row_bytes(history))
        if state != "SUBJECT_OUTCOME_SEALED":
            not_witnessed.append(CellHistory.model_validate(history))
        if state == "MISSING":
            missing.append(t["cell_id"])
    data = b"".join(r + b"\n" for r in rows)
    del rows
    blocked = sorted(
        s
        for s, (reg, wit, _) in strata.items()
        if wit * 100 < p.coverage.floor_percent * reg or s in p.not_comparable_strata
    )
    report = IncompleteEvidenceReport(
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
        missing_cell_ids=sorted(missing),
        blocked_strata=blocked,
        not_comparable_strata=p.not_comparable_strata,
        cells_not_witnessed=not_witnessed,
        cell_history=_rows_file(CELL_HISTORY_FILE, data, p.coverage.registered),
        artifacts=sorted(artifacts),
    )
    return report, data


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
    schema_version: Literal["afb.scorecard/2"] = Field(default="afb.scorecard/2", alias="schema")
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
    cell_scores: RowsFile = Field(description="every registered cell's CellScore row")
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


@dataclass
class _Tally:
    """One group's measures, accumulated a cell at a time."""

    cells: int = 0
    completed: int = 0
    duplicate_effects: int = 0
    cells_with_duplicates: int = 0
    faulted: int = 0
    pairs: int = 0
    extra_tool_calls: int = 0
    wall_ratios: list[float] = field(default_factory=list)

    def add(
        self, completed: bool, dup: int, faulted: bool, extra: int | None, wall: float | None
    ) -> None:
        self.cells += 1
        self.completed += completed
        self.duplicate_effects += dup
        self.cells_with_duplicates += dup > 0
        if faulted:
            self.faulted += 1
            if extra is not None:  # paired with its baseline
                self.pairs += 1
                self.extra_tool_calls += extra
                if wall is not None:
                    self.wall_ratios.append(wall)

    def overhead(self) -> RecoveryOverhead:
        r = self.wall_ratios
        return RecoveryOverhead(
            pairs=self.pairs,
            missing_baseline=self.faulted - self.pairs,
            extra_tool_calls_total=self.extra_tool_calls if self.pairs else None,
            extra_tool_calls_mean=ratio(self.extra_tool_calls, self.pairs),
            wall_time_ratio_median=round(statistics.median(r), 4) if r else None,
        )

    def measures(self, overhead: RecoveryOverhead | None) -> Measures:
        return Measures(
            completion=Completion(
                completed=self.completed, cells=self.cells, rate=ratio(self.completed, self.cells)
            ),
            duplicate_effects=DuplicateEffects(
                duplicate_effects=self.duplicate_effects,
                cells_with_duplicates=self.cells_with_duplicates,
                share_without_duplicates=ratio(self.cells - self.cells_with_duplicates, self.cells),
            ),
            recovery_overhead=overhead,
        )


def build_scorecard(ev: SubjectEvaluation, slots: list[Slot]) -> tuple[PublishableScorecard, bytes]:
    """The only constructor callers should use (the model re-validates the proof anyway).

    Returns the scorecard and its per-cell rows (CELL_SCORES_FILE's bytes). Two streaming passes
    over the terminal lines: the baselines, then the cells; the state is O(strata) plus the
    faulted cells' wall-time ratios (for the medians) and the rows' bytes.
    """
    p = ev.proof
    if p.decision != "eligible" or p.reason_codes or not p.hash_is_valid():
        raise ValueError("a scorecard can only be built from an eligible proof")
    if jsonl_hash(ev.terminal_jsonl) != p.terminal_records_hash:
        raise ValueError("terminal records do not match the proof")
    index = {s.slot_id: s for s in slots}
    none = NO_FAULT
    baselines: dict[tuple[str, int], tuple[int | None, str | None]] = {}
    for line in ev.terminal_lines():
        # Only baseline cells matter here. In a canonical TerminalRecord line these bytes occur
        # exactly when its kind is "none": a quote inside a string is always escaped, and only
        # the record itself has a "kind" member.
        if b'"kind":"none"' not in line:
            continue
        t = _parse(line)
        if t["kind"] == none and t["status"] == "COMPLETED":
            s = index[t["slot_id"]]
            baselines[(s.task_id, s.seed)] = (t["tool_calls"], t["wall_ns"])
    overall = _Tally()
    by_stratum: dict[str, _Tally] = defaultdict(_Tally)
    rows: list[bytes] = []
    scorers: set[str] = set()
    for line in ev.terminal_lines():
        t = _parse(line)
        status = t["status"]
        if status is None:
            raise ValueError(f"cell {t['cell_id']} has no terminal status")
        faulted = t["kind"] != none
        extra = wall = None
        if faulted:
            s = index[t["slot_id"]]
            base = baselines.get((s.task_id, s.seed))
            if base is not None:
                calls, base_calls = t["tool_calls"], base[0]
                if calls is not None and base_calls is not None:
                    extra = calls - base_calls
                wall_ns, base_ns = t["wall_ns"], base[1]
                if wall_ns and base_ns and int(base_ns) > 0:
                    wall = round(int(wall_ns) / int(base_ns), 4)
        dup = max(0, (t["committed_effects"] or 0) - (t["intended_effects"] or 0))
        rows.append(
            _row_bytes(
                {  # members in sorted key order (see _row_bytes)
                    "cell_id": t["cell_id"],
                    "duplicate_effects": dup,
                    "extra_tool_calls": extra,
                    "status": status,
                    "stratum": t["stratum"],
                    "wall_time_ratio": wall,
                }
            )
        )
        done = status == "COMPLETED"
        overall.add(done, dup, faulted, extra, wall)
        by_stratum[t["stratum"]].add(done, dup, faulted, extra, wall)
        if t["scorer_version"]:
            scorers.add(t["scorer_version"])
    data = b"".join(r + b"\n" for r in rows)
    del rows
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
        scorer_version=",".join(sorted(scorers)),
        overall=overall.measures(overall.overhead()),
        strata={
            # Recovery overhead is a measure of faulted cells: none for a baseline stratum.
            k: m.measures(m.overhead() if m.faulted else None)
            for k, m in sorted(by_stratum.items())
        },
        cell_scores=_rows_file(CELL_SCORES_FILE, data, p.coverage.registered),
    ), data
