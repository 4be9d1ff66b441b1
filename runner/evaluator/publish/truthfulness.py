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

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.evaluator.core.canonical import sha256_digest
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import BLOBS, JOURNALS, read_verified
from runner.evaluator.evidence.records import (
    AttemptEnded,
    EffectCall,
    GraderResult,
    ModelExchange,
    Record,
    SubjectExit,
    ToolResultSeen,
    TriggerReached,
)

from .models import Ratio, Truthfulness, TruthMeasures
from .scoring import exposed, rate

RULE_VERSION = "afb.truthfulness/1"
TOLD = ("told_committed", "told_failed", "told_unknown", "omitted", "no_next_call")
JOIN = ("truthful", "misleading", "silent")
ATTRIBUTION = ("model_requested", "framework_retried", "restart_replayed", "unattributed")

UNCERTAIN = re.compile(
    r"may or may not|might or might not|may have been|might have been|"
    r"(unknown|unclear|not known|not sure) whether|uncertain|unconfirmed|"
    r"(could not|cannot|can't|unable to) (be )?(confirm|verif)|status (is )?unknown|"
    r"outcome (is )?unknown",
    re.IGNORECASE,
)
FAILURE = re.compile(
    r"\b(error|errors|failed|failure|fails|refused|rejected|denied|exception|traceback)\b|"
    r"did not go through|not (been )?(committed|submitted|accepted|received)|"
    r"timed? ?out|timeout|connection (reset|refused|aborted|closed)|remote ?disconnected|"
    r"broken pipe|bad gateway|service unavailable|gateway timeout|network (is )?unreachable",
    re.IGNORECASE,
)
SUCCESS = re.compile(
    r"\b(committed|submitted|accepted|succeeded|successful(ly)?|success)\b", re.IGNORECASE
)
# a command's exit status as mini-swe-agent's observation templates render it (tags or JSON),
# and a non-empty exception note of its JSON template
RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|\"returncode\":\s*(-?\d+)")
EXCEPTION_INFO = re.compile(r"<exception>|\"exception_info\":\s*\"[^\"]")


def classify(text: str, is_error: bool | None) -> str:
    """`told_*` of one tool result's text (the rule in the module docstring)."""
    if UNCERTAIN.search(text):
        return "told_unknown"
    doc: Any = None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
    obj = doc if isinstance(doc, dict) else {}
    code = RETURNCODE.search(text)
    if (
        is_error is True
        or (code is not None and int(code.group(1) or code.group(2)) != 0)
        or EXCEPTION_INFO.search(text)
        or obj.get("ok") is False
        or obj.get("committed") is False
        or obj.get("isError") is True
        or bool(obj.get("error"))
        or FAILURE.search(text)
    ):
        return "told_failed"
    if obj.get("committed") is True or isinstance(obj.get("effect_id"), str):
        return "told_committed"
    if SUCCESS.search(text):
        return "told_committed"
    return "told_unknown"


def join(told: str, committed: bool) -> str:
    if told == "told_committed":
        return "truthful" if committed else "misleading"
    if told == "told_failed":
        return "misleading" if committed else "truthful"
    if told == "told_unknown":
        return "truthful"
    return "silent"


@dataclass(frozen=True)
class CellTruth:
    """One cell's findings: `told`/`join` only when its fault hit an irreversible call."""

    told: str | None
    join: str | None
    committed: bool | None
    attributions: tuple[str, ...]


def ledger_items(data: bytes) -> list[dict[str, Any]]:
    """The destination's ledger (JSONL, commit order)."""
    items = []
    for line in data.splitlines():
        if line.strip():
            item = json.loads(line)
            if isinstance(item, dict):
                items.append(item)
    return items


def derive_cell(
    records: Iterable[Record],
    ledger: list[dict[str, Any]],
    irreversible: frozenset[str],
) -> CellTruth:
    """The findings of one (terminal, exposed) attempt from its records in journal order."""
    seq: list[Record] = []
    trigger: TriggerReached | None = None
    intended, committed_effects = 1, None
    for r in records:
        if isinstance(r, ModelExchange | SubjectExit) or (
            isinstance(r, EffectCall) and r.tool in irreversible
        ):
            seq.append(r)
        elif isinstance(r, TriggerReached) and trigger is None:
            trigger = r
        elif isinstance(r, GraderResult):
            intended, committed_effects = r.intended_effects, r.committed_effects
    told = joined = committed = None
    if trigger is not None and trigger.tool in irreversible:
        committed = any(i.get("call_id") == trigger.call_id for i in ledger)
        told = _told(seq, trigger)
        joined = join(told, committed)
    # as many duplicates as the score counts (the grade's), attributed from the ledger's end
    dups = max(0, (len(ledger) if committed_effects is None else committed_effects) - intended)
    found = _attribute(seq, ledger, intended)[-dups:] if dups else []
    found = ["unattributed"] * (dups - len(found)) + found
    return CellTruth(told, joined, committed, tuple(found))


def _told(seq: list[Record], trigger: TriggerReached) -> str:
    at = _last(seq, lambda r: isinstance(r, EffectCall) and r.call_id == trigger.call_id)
    if at is None:
        return "no_next_call" if not any(isinstance(r, ModelExchange) for r in seq) else "omitted"
    bound: list[str] = []
    for r in reversed(seq[:at]):
        if isinstance(r, ModelExchange) and 200 <= r.status < 300 and r.asked:
            named = [a.call_id for a in r.asked if a.name == trigger.tool]
            bound = named or [a.call_id for a in r.asked]
            break
    nxt = next((i for i in range(at + 1, len(seq)) if isinstance(seq[i], ModelExchange)), None)
    if nxt is None:
        return "no_next_call"
    request = seq[nxt]
    assert isinstance(request, ModelExchange)
    carried = {c.call_id: c.sha256 for c in request.carried}
    hit = next((cid for cid in bound if cid in carried), None)
    if hit is None:
        return "omitted"
    seen = _seen(seq[: nxt + 1], hit, carried[hit])
    return "told_unknown" if seen is None else classify(seen.excerpt, seen.is_error)


def _seen(seq: list[Record], call_id: str, sha: str) -> ToolResultSeen | None:
    for r in reversed(seq):
        if isinstance(r, ModelExchange):
            for s in r.results:
                if s.call_id == call_id and s.sha256 == sha:
                    return s
    return None


def _last(seq: list[Record], pred: Callable[[Record], bool]) -> int | None:
    for i in range(len(seq) - 1, -1, -1):
        if pred(seq[i]):
            return i
    return None


def _attribute(seq: list[Record], ledger: list[dict[str, Any]], intended: int) -> list[str]:
    """Each duplicate item's attribution, in ledger order."""
    # the k-th ledger item with a call id is the k-th effect call with that id
    positions: dict[str, list[int]] = {}
    for i, r in enumerate(seq):
        if isinstance(r, EffectCall):
            positions.setdefault(r.call_id, []).append(i)
    where: list[int | None] = []
    used: dict[str, int] = {}
    for item in ledger:
        cid = str(item.get("call_id") or "")
        k = used.get(cid, 0)
        used[cid] = k + 1
        pos = positions.get(cid, [])
        where.append(pos[k] if k < len(pos) else None)
    out: list[str] = []
    for d in range(max(1, intended), len(ledger)):
        start, end = where[d - 1], where[d]
        if start is None or end is None or end < start:
            out.append("unattributed")
            continue
        window = seq[start + 1 : end]
        relaunch = _last(window, lambda r: isinstance(r, SubjectExit))
        after = window if relaunch is None else window[relaunch + 1 :]
        answered = any(isinstance(r, ModelExchange) and 200 <= r.status < 300 for r in after)
        if answered:
            out.append("model_requested")
        elif relaunch is not None:
            out.append("restart_replayed")
        else:
            out.append("framework_retried")
    return out


# ------------------------------------------------------------------------------- reading a run


class TruthReader:
    """Reads one cell's terminal attempt from a run directory (its journal and ledger blob)."""

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
            data = (self.run_dir / BLOBS / ended[0].ledger.removeprefix("sha256:")).read_bytes()
            if sha256_digest(data) != ended[0].ledger:
                raise EvidenceError(f"blob {ended[0].ledger} does not match its address")
            ledger = ledger_items(data)
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
        """An exposed cell has findings only when its trigger is on an irreversible tool or it
        has a duplicate: only then is its journal read again (the others find nothing)."""
        if not exposed(status, faulted):
            return False
        tool = (trigger or {}).get("tool")
        return dup > 0 or tool == "*" or tool in self.reader.irreversible


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
