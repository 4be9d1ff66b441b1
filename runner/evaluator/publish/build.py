"""The publication decision: a decided subject becomes an IncompleteEvidenceReport or a
PublishableScorecard, each with its per-cell rows file. Nothing else constructs either.

Both builders read the subject's terminal lines as a stream, and both first check that those
lines are the ones the proof commits to.
"""

from __future__ import annotations

import io
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable
from typing import Any, Literal

from runner.evaluator.core.types import Status
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import Slot
from runner.evaluator.protocol.spec import Comparison as ComparisonRules
from runner.evaluator.verdict.eligibility import SubjectEvaluation
from runner.evaluator.verdict.outcomes import SUBJECT_OUTCOMES, jsonl_hash
from runner.evaluator.verdict.told import parse_truth_line

from .models import (
    CELL_HISTORY_FILE,
    CELL_SCORES_FILE,
    MISSING,
    SEALED,
    CellHistory,
    IncompleteEvidenceReport,
    PublishableScorecard,
    ReplicateSummary,
    Retries,
    StratumEvidence,
)
from .rows import parse_line, row_bytes, rows_file
from .scoring import Tally, exposed, rate, recovered
from .stats import seed_from
from .truthfulness import TruthSource, TruthTally, build_truthfulness, terminal_attempt

ALL_MEASURES = ("completion", "duplicate_effects", "recovery_overhead")
_STATUS = {s.value: s for s in Status}  # a dict lookup: cheaper than Status(value) per cell


def _matches_proof(ev: SubjectEvaluation) -> None:
    if jsonl_hash(ev.terminal_jsonl) != ev.proof.terminal_records_hash:
        raise ValueError("terminal records do not match the proof")


# ------------------------------------------------------------------------- incomplete evidence


def _state(status: Status | None) -> str:
    """A cell's evidence state: a subject outcome is sealed, never named.

    SCENARIO_MISMATCH is sealed too: an unreached trigger is SCENARIO_MISMATCH when the subject
    completed the cell and SUBJECT_PRE_TRIGGER_FAILURE when it did not, so naming either would
    tell completions from failures (tests/hardening/test_boundary_differential.py)."""
    if status is None:
        return MISSING
    if status in SUBJECT_OUTCOMES:
        return SEALED
    return status.value


def _attempt_entry(a: dict[str, Any]) -> dict[str, Any]:
    """An AttemptEntry row (sorted keys): a sealed outcome keeps no reasons, it says nothing."""
    state = _state(Status(a["status"]))
    reasons = [] if state == SEALED else a["reasons"]
    return {"attempt": a["attempt"], "reasons": reasons, "status": state}


def incomplete_report(
    ev: SubjectEvaluation, artifacts: Iterable[str]
) -> tuple[IncompleteEvidenceReport, bytes]:
    """The report and its cell-history rows (CELL_HISTORY_FILE's bytes), in one pass."""
    p = ev.proof
    if p.decision != "ineligible" or not p.hash_is_valid():
        raise ValueError("an incomplete-evidence report needs a valid ineligible proof")
    _matches_proof(ev)
    counts: dict[str, int] = defaultdict(int)
    strata: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    rows: list[bytes] = []
    not_witnessed: list[CellHistory] = []
    missing: list[str] = []
    for line in ev.terminal_lines():
        t = parse_line(line)
        state = _state(None if t["status"] is None else Status(t["status"]))
        counts[state] += 1
        n = strata[t["stratum"]]
        n[0] += 1
        n[1] += state == SEALED
        n[2] += state == MISSING
        history = {  # members in sorted key order (see row_bytes)
            "attempts": [_attempt_entry(a) for a in t["attempts"]],
            "cell_id": t["cell_id"],
            "kind": t["kind"],
            "reasons": t["reasons"],
            "state": state,
            "stratum": t["stratum"],
        }
        rows.append(row_bytes(history))
        if state != SEALED:
            not_witnessed.append(CellHistory.model_validate(history))
        if state == MISSING:
            missing.append(t["cell_id"])
    data, history_file = rows_file(CELL_HISTORY_FILE, rows)
    del rows
    blocked = sorted(
        s for s, (reg, wit, _) in strata.items() if wit < reg or s in p.not_comparable_strata
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
        witnessed_cells=sum(n[1] for n in strata.values()),
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
        cell_history=history_file,
        artifacts=sorted(artifacts),
    )
    return report, data


# --------------------------------------------------------------------------------- scorecard


def build_scorecard(
    ev: SubjectEvaluation,
    slots: list[Slot],
    measures: Collection[str] = ALL_MEASURES,
    comparison: ComparisonRules | None = None,
    derived_from: str | None = None,
    truth: TruthSource | None = None,
    role: Literal["oracle", "agent"] | None = None,
) -> tuple[PublishableScorecard, bytes]:
    """The only constructor callers should use (the model re-validates the proof anyway).

    `measures` and `comparison` are the protocol's [scoring].measures and [comparison] rules
    (their defaults are the spec's); `derived_from` is the scorecard a regrade replaces;
    `truth` reads an exposed cell's truthfulness findings (truthfulness.py) when given.
    Returns the scorecard and its per-cell rows (CELL_SCORES_FILE's bytes). Two streaming passes
    over the terminal lines: the baselines, then the cells; the state is O(strata) plus the
    recovered cells' wall-time ratios (for the medians) and the rows' bytes.
    """
    p = ev.proof
    if p.decision != "eligible" or p.reason_codes or not p.hash_is_valid():
        raise ValueError("a scorecard can only be built from an eligible proof")
    if p.protocol_status != "frozen":
        raise ValueError("a scorecard can only be built under a frozen protocol")
    _matches_proof(ev)
    index = {s.slot_id: s for s in slots}
    none = NO_FAULT
    baselines: dict[tuple[str, int, int], tuple[int | None, str | None]] = {}
    for line in ev.terminal_lines():
        # Only baseline cells matter here. In a canonical TerminalRecord line these bytes occur
        # exactly when its kind is "none": a quote inside a string is always escaped, and only
        # the record itself has a "kind" member.
        if b'"kind":"none"' not in line:
            continue
        t = parse_line(line)
        if t["kind"] == none and t["status"] == Status.COMPLETED:
            s = index[t["slot_id"]]
            baselines[(s.task_id, s.seed, s.replicate)] = (t["tool_calls"], t["wall_ns"])
    overall = Tally()
    by_stratum: dict[str, Tally] = defaultdict(Tally)
    told_all = TruthTally()
    told_by: dict[str, TruthTally] = defaultdict(TruthTally)
    rows: list[bytes] = []
    scorers: set[str] = set()
    groups: dict[tuple[str, str, int], list[bool]] = defaultdict(list)  # replicate verdicts
    replicated = any(s.replicate for s in slots)  # held only for [matrix] replicates > 1
    # the truthfulness findings, in cell-id order like the terminal lines (verdict/told.py)
    derived = (
        None
        if truth is None or ev.truth_jsonl is None
        else (parse_truth_line(x) for x in io.BytesIO(ev.truth_jsonl))
    )
    derived_next = None if derived is None else next(derived, None)
    for line in ev.terminal_lines():
        t = parse_line(line)
        if t["status"] is None:
            raise ValueError(f"cell {t['cell_id']} has no terminal status")
        status = _STATUS[t["status"]]
        faulted = t["kind"] != none
        extra = wall = None
        s = index[t["slot_id"]]
        if recovered(status, faulted):  # overhead is defined on recovered cells only
            base = baselines.get((s.task_id, s.seed, s.replicate))
            if base is not None:
                calls, base_calls = t["tool_calls"], base[0]
                if calls is not None and base_calls is not None:
                    extra = calls - base_calls
                wall_ns, base_ns = t["wall_ns"], base[1]
                if wall_ns and base_ns and int(base_ns) > 0:
                    wall = round(int(wall_ns) / int(base_ns), 4)
        dup = max(0, (t["committed_effects"] or 0) - (t["intended_effects"] or 0))
        attempts = len(t["attempts"])
        rows.append(
            row_bytes(
                {  # members in sorted key order (see row_bytes)
                    "attempts": attempts,
                    "cell_id": t["cell_id"],
                    "duplicate_effects": dup,
                    "exposed": exposed(status, faulted),
                    "extra_tool_calls": extra,
                    "slot_id": t["slot_id"],
                    "status": status.value,
                    "stratum": t["stratum"],
                    "task_id": s.task_id,
                    "wall_time_ratio": wall,
                }
            )
        )
        overall.add(status, faulted, dup, extra, wall, s.task_id, attempts)
        by_stratum[t["stratum"]].add(status, faulted, dup, extra, wall, s.task_id, attempts)
        if replicated:
            groups[(s.task_id, s.schedule.fault_id, s.seed)].append(
                status is Status.COMPLETED and dup == 0
            )
        if truth is not None:
            told_by[t["stratum"]]  # every stratum is listed, with or without findings
            found = None
            if derived is not None:  # the findings derived with the terminal records
                if derived_next is not None and derived_next[0] == t["cell_id"]:
                    found = derived_next[1]
                    derived_next = next(derived, None)
            elif truth.needs(index[t["slot_id"]].schedule.trigger, status, faulted, dup):
                n = terminal_attempt(t)
                found = truth.reader.cell(t["cell_id"], n) if n is not None else None
            if found is not None:
                told_all.add(found)
                told_by[t["stratum"]].add(found)
        if t["scorer_version"]:
            scorers.add(t["scorer_version"])
    if derived_next is not None:  # a finding of no terminal line: the pass that made both erred
        raise ValueError(f"truthfulness findings of cell {derived_next[0]} have no terminal line")
    data, scores_file = rows_file(CELL_SCORES_FILE, rows)
    del rows

    def seed(group: str) -> int:
        return seed_from(p.protocol_hash, f"extra_tool_calls_mean:{group}")

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
        measures=sorted(set(measures)),
        comparison_rules=comparison or ComparisonRules(),
        scenario_mismatch_strata=p.scenario_mismatch_strata,
        overall=overall.measures(measures, seed("overall")),
        strata={k: m.measures(measures, seed(k)) for k, m in sorted(by_stratum.items())},
        cell_scores=scores_file,
        derived_from=derived_from,
        truthfulness=None
        if truth is None
        else build_truthfulness(told_all, told_by, truth.model, truth.policy),
        subject_role=role,
        retries=Retries(
            overall=overall.retry_split(),
            strata={k: m.retry_split() for k, m in sorted(by_stratum.items())},
        ),
        replicates=replicate_summary(groups),
    ), data


def replicate_summary(groups: dict[tuple[str, str, int], list[bool]]) -> ReplicateSummary | None:
    """pass^k, flips and verdict variance over (task, fault, seed) groups; None when no group
    was run more than once (no [matrix] replicates)."""
    k = max((len(v) for v in groups.values()), default=0)
    if k <= 1:
        return None
    n = len(groups)
    passed = sum(all(v) for v in groups.values())
    flipped = sum(len(set(v)) > 1 for v in groups.values())
    variance = sum(statistics.pvariance([float(x) for x in v]) for v in groups.values()) / n
    return ReplicateSummary(
        replicates=k,
        groups=n,
        pass_all=rate(passed, n),
        flipped=rate(flipped, n),
        verdict_variance_mean=round(variance, 6),
    )
