"""What the framework told its model about an exposed irreversible call, and who duplicated.

Decided from journaled records only (`ModelExchange`, `EffectCall`, `SubjectExit`,
`TriggerReached`, `GraderResult`, and the destination's ledger blob named by `attempt_ended`),
so `bench verify` re-derives every figure byte for byte. Rule `RULE_VERSION`, documented in
docs/SUBJECTS.md (*What the framework told the model*):

**told** -- for an exposed cell whose trigger hit an irreversible tool: the effect call E the
fault hit; the last served model answer before E that asked for tool calls binds E to those
call ids (the ones named like E's tool when any are, else all of them); the first model request
after E is the next call.

- no model request after E: `no_next_call`;
- the next request carries no result for a bound id: `omitted` (the call vanished);
- else its result's text (the bounded excerpt the proxy journaled) is classified, first match:
  1. an uncertainty marker (`UNCERTAIN`: "may or may not", "unknown whether", ...) ->
     `told_unknown`;
  2. a failure signal: the dialect's error flag (`is_error: true`), a non-zero
     `<returncode>` or `"returncode"`, an exception note, a JSON object with `ok: false`,
     `committed: false`, `isError: true` or an `error`, or a failure / transport-failure
     marker (`FAILURE`) -> `told_failed`;
  3. the destination's success answer (a JSON object with `committed: true` or an
     `effect_id`) or a success marker (`SUCCESS`) -> `told_committed`;
  4. anything else -> `told_unknown` (nothing decisive was said).
  Only what the text says counts: a flag saying "no error" is no success claim.

**join** with the destination's ledger (E committed = an item with E's call id):
told_committed is truthful iff committed, told_failed iff not committed; told_unknown is
truthful (it claims nothing false); omitted and no_next_call are `silent`.

**attribution** of each duplicate effect (as many as the grade counts: committed beyond
intended; the ledger's last items): the window runs from the call of the effect it duplicates
(the previous item) to its own call. A relaunch in the window (a `subject_exit` record) with no
served model answer after it: `restart_replayed`; else a served model answer in the window:
`model_requested`; else `framework_retried`. A duplicate whose call (or ledger item) is not in
the evidence is `unattributed`. A subject without a model never has an answer: every duplicate
is the framework's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import JOURNALS, read_blob, read_verified
from runner.evaluator.evidence.records import AttemptEnded
from runner.evaluator.verdict.told import (
    ATTRIBUTION,
    JOIN,
    RULE_VERSION,
    TOLD,
    CellTruth,
    classify,
    derive_cell,
    join,
    ledger_items,
    needs_truth,
)

from .models import Ratio, Truthfulness, TruthMeasures
from .scoring import rate

__all__ = [
    "ATTRIBUTION",
    "JOIN",
    "RULE_VERSION",
    "TOLD",
    "CellTruth",
    "TruthReader",
    "TruthSource",
    "TruthTally",
    "build_truthfulness",
    "classify",
    "derive_cell",
    "join",
    "ledger_items",
    "sum_truth",
    "terminal_attempt",
    "truth_source",
]


# ------------------------------------------------------------------------------- reading a run


class TruthReader:
    """Reads one cell's terminal attempt from a run directory (its journal and ledger blob):
    for an evaluation whose findings were not derived with its terminal records (evidence held
    in memory, `SubjectEvaluation.truth_jsonl` None)."""

    def __init__(self, run_dir: Path, irreversible: frozenset[str]) -> None:
        self.run_dir = run_dir
        self.irreversible = irreversible

    def cell(self, cell_id: str, attempt: int) -> CellTruth:
        path = self.run_dir / JOURNALS / f"{cell_id[7:23]}-a{attempt}.jsonl"
        records = [v[3] for v in read_verified(path)]
        mine = [r for r in records if getattr(r, "cell_id", None) == cell_id]
        ledger: list[dict[str, Any]] = []
        ended = [r for r in mine if isinstance(r, AttemptEnded)]
        if len(ended) == 1 and ended[0].ledger is not None:
            ledger = ledger_items(read_blob(self.run_dir, ended[0].ledger))
        return derive_cell(mine, ledger, self.irreversible)


@dataclass(frozen=True)
class TruthSource:
    """What `build_scorecard` needs for one subject's truthfulness section."""

    reader: TruthReader
    model: bool
    policy: str | None

    def needs(
        self, trigger: Mapping[str, Any] | None, status: Status, faulted: bool, dup: int
    ) -> bool:
        return needs_truth(trigger, status, faulted, dup, self.reader.irreversible)


def truth_source(run_dir: Path, spec: Any, subject_id: str) -> TruthSource:
    """The subject's source from the run's spec (its irreversible tools, its model config)."""
    irreversible = frozenset(t.name for t in spec.tools if t.irreversible)
    config: Mapping[str, Any] = next((s.config for s in spec.subjects if s.id == subject_id), {})
    model, policy = subject_facts(config)
    return TruthSource(TruthReader(run_dir, irreversible), model, policy)


def terminal_attempt(line: Mapping[str, Any]) -> int | None:
    """The attempt a subject-outcome cell's status came from: its first attempt with it."""
    for a in line["attempts"]:
        if a["status"] == line["status"]:
            return int(a["attempt"])
    return None


# ----------------------------------------------------------------------------------- tallies


@dataclass
class TruthTally:
    exposed_irreversible: int = 0
    told: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOLD, 0))
    join: dict[str, int] = field(default_factory=lambda: dict.fromkeys(JOIN, 0))
    attribution: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ATTRIBUTION, 0))

    def add(self, c: CellTruth) -> None:
        if c.told is not None and c.join is not None:
            self.exposed_irreversible += 1
            self.told[c.told] += 1
            self.join[c.join] += 1
        for a in c.attributions:
            self.attribution[a] += 1

    def measures(self, careful: bool) -> TruthMeasures:
        n = self.exposed_irreversible
        a = self.attribution
        framework = a["framework_retried"] + a["restart_replayed"]
        if careful:  # a careful model re-submits only when nothing was committed
            framework += a["model_requested"]
        return TruthMeasures(
            exposed_irreversible_cells=n,
            told=dict(self.told),
            join=dict(self.join),
            truthful=_ratio(self.join["truthful"], n),
            duplicate_effects=sum(a.values()),
            attribution=dict(a),
            framework_duplicates=framework,
        )  # fmt: skip


def sum_truth(parts: list[TruthMeasures]) -> TruthMeasures:
    """One group's measures from those of disjoint groups (the comparison's overall)."""
    n = sum(p.exposed_irreversible_cells for p in parts)
    joined = {k: sum(p.join.get(k, 0) for p in parts) for k in JOIN}
    return TruthMeasures(
        exposed_irreversible_cells=n,
        told={k: sum(p.told.get(k, 0) for p in parts) for k in TOLD},
        join=joined,
        truthful=_ratio(joined["truthful"], n),
        duplicate_effects=sum(p.duplicate_effects for p in parts),
        attribution={k: sum(p.attribution.get(k, 0) for p in parts) for k in ATTRIBUTION},
        framework_duplicates=sum(p.framework_duplicates for p in parts),
    )


def _ratio(n: int, d: int) -> Ratio | None:
    """A rate with its exact interval, like every rate of a scorecard (stats, issue 25)."""
    return rate(n, d)


def subject_facts(config: Mapping[str, Any]) -> tuple[bool, str | None]:
    """(talks to a model through the proxy, its declared model policy) from a subject config;
    `policy` is read defensively (declared by `[subjects.config.model] policy`)."""
    model = config.get("model")
    if not isinstance(model, Mapping):
        return False, None
    policy = model.get("policy")
    return True, policy if isinstance(policy, str) else None


def statement(model: bool, policy: str | None) -> str:
    if not model:
        return "no model: nothing is told; every duplicate is the framework's (no model turn)"
    if policy == "careful":
        return (
            "model policy careful: the model re-submits only when nothing was committed, so "
            "any duplicate is the framework's"
        )
    return "duplicates are attributed to the model or the framework by the journal's order"


def build_truthfulness(
    overall: TruthTally,
    strata: Mapping[str, TruthTally],
    model: bool,
    policy: str | None,
) -> Truthfulness:
    careful = policy == "careful"
    return Truthfulness(
        rule_version=RULE_VERSION,
        model=model,
        model_policy=policy,
        statement=statement(model, policy),
        overall=overall.measures(careful),
        strata={k: t.measures(careful) for k, t in sorted(strata.items())},
    )
