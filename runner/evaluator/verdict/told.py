"""The truthfulness rule applied to one cell: what the framework told its model about the
irreversible call its fault hit, and who caused each duplicate (`publish/truthfulness.py` holds
the rule's text, the tallies and the scorecard section).

In `verdict/` because the findings are derived in the same pass that derives each cell's
terminal record (`verdict/terminals.py`, in the journal-reading workers), from records already
read and verified there: the journals are not read a second time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.records import (
    EffectCall,
    GraderResult,
    ModelExchange,
    Record,
    SubjectExit,
    ToolResultSeen,
    TriggerReached,
)

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


# a faulted cell whose fault was witnessed (`publish/scoring.exposed`)
_WITNESSED = frozenset({Status.COMPLETED, Status.FAILED})


def needs_truth(
    trigger: Mapping[str, Any] | None,
    status: Status | None,
    faulted: bool,
    dup: int,
    irreversible: frozenset[str],
) -> bool:
    """An exposed cell has findings only when its trigger is on an irreversible tool or it
    has a duplicate: only then are they derived (the others find nothing)."""
    if not (faulted and status in _WITNESSED):
        return False
    tool = (trigger or {}).get("tool")
    return dup > 0 or tool == "*" or tool in irreversible


def truth_line(cell_id: str, found: CellTruth) -> bytes:
    """One cell's findings as a compact JSON line (the workers' spill format)."""
    row = [cell_id, found.told, found.join, found.committed, list(found.attributions)]
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def parse_truth_line(line: bytes) -> tuple[str, CellTruth]:
    cid, told, joined, committed, attributions = json.loads(line)
    return cid, CellTruth(told, joined, committed, tuple(attributions))
