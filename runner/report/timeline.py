"""A cell's journals as swimlane events, in the spirit of Jepsen's timeline.html.

Each attempt becomes a list of compact events `[t_us, lane, label, hash, detail]` (t relative
to the attempt's first record; hash = the journal line's digest, shown for fault evidence),
plus the fault window (injected -> recovered/released). The arrays are embedded once in the
HTML and drawn by a little JS on demand, so a large run costs JSON, not DOM.

The publication boundary: with `outcomes=False` (a subject without a scorecard) only the fault
evidence is kept (attempt start, trigger, lifecycle, actuator receipt, witness observations,
harness errors). Grades, exits, tool-call counts, effects and wall times say how the subject did,
so they are never read for such a subject, and the axis ends at the last kept record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.evaluator.core.canonical import parse_json
from runner.evaluator.evidence.journal import Entry

LANES = ("tool calls", "egress effects", "model calls", "sandbox", "fault lifecycle")
TOOL, EGRESS, MODEL, SANDBOX, FAULT = range(5)
DETAIL_MAX = 360  # characters of an observation kept in the report (its hash names the rest)
EVIDENCE_TYPES = frozenset(
    {"attempt_started", "trigger_reached", "lifecycle", "actuator_receipt",
     "witness_observation", "harness_error"}
)  # fmt: skip


@dataclass
class CellTimeline:
    """A cell's attempts as the JSON embedded in the report (kept as text: a large run holds
    100,000s of these, and text is a tenth of the size of the lists it encodes)."""

    json: str
    injected: bool  # the last attempt's fault reached the `injected` lifecycle state


def embed_json(value: Any) -> str:
    """JSON for a <script type="application/json">: no "<" or "&", so no "</script>"."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return text.replace("<", "\\u003c").replace("&", "\\u0026")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 1] + "…"


def _event(r: Any) -> tuple[int, str, bool, str] | None:
    """(lane, label, show hash, detail) of one record, or None if it is not drawn."""
    t = r.type
    if t == "attempt_started":
        return SANDBOX, "attempt started", False, f"fault {r.fault_id} ({r.kind})"
    if t == "trigger_reached":
        return TOOL, f"{r.tool}#{r.ordinal} {r.phase}", False, f"call {r.call_id}: trigger reached"
    if t == "lifecycle":
        return FAULT, r.state, True, r.note
    if t == "actuator_receipt":
        body = {"actuator": r.actuator, "applied": r.applied, "detail": r.detail}
        return FAULT, "actuator receipt", True, _short(body)
    if t == "witness_observation":
        return FAULT, f"witness: {r.name}", True, _short(r.observation)
    if t == "harness_error":
        return SANDBOX, f"harness error: {r.stage}", True, _short(r.message)
    if t == "subject_exit":
        how = f"signal {r.term_signal}" if r.signaled else f"exit {r.exit_code}"
        return SANDBOX, f"subject {how}", False, f"pid {r.pid}, launch {r.restart_index}"
    if t == "tool_calls":
        by = ", ".join(f"{k} {v}" for k, v in sorted(r.by_tool.items()))
        return TOOL, f"{r.calls} tool calls", False, by
    if t == "grader_result":
        done = "completed" if r.completed else "not completed"
        eff = f"effects {r.committed_effects} committed / {r.intended_effects} intended"
        return SANDBOX, f"graded: {done}", True, eff
    if t == "attempt_ended":
        return SANDBOX, f"ended: {r.outcome}", False, r.detail
    return None


def _effects(data: bytes, t0: int, intended: int) -> list[list[Any]]:
    out: list[list[Any]] = []
    rows = sorted((parse_json(x) for x in data.splitlines() if x), key=lambda e: e.get("seq", 0))
    for n, e in enumerate(rows):
        dup = n >= intended
        label = f"effect {e.get('effect_id', '?')}" + (" DUPLICATE" if dup else "")
        t = (int(e.get("committed_at_ns", t0)) - t0) // 1000
        key = e.get("idempotency_key") or "-"
        detail = f"call {e.get('call_id')}, kind {e.get('kind')}, idempotency key {key}"
        out.append([t, EGRESS, label, "", detail, 1 if dup else 0])
    return out


def attempt_events(
    entries: list[Entry], outcomes: bool, ledger: Callable[[str], bytes | None] | None = None
) -> dict[str, Any]:
    """One attempt's journal as compact events (see the module docstring)."""
    t0 = int(entries[0].at_ns)
    events: list[list[Any]] = []
    window: list[int | None] = [None, None]
    intended, ledger_addr = 0, None
    for e in entries:
        r = e.record
        if not outcomes and r.type not in EVIDENCE_TYPES:
            continue
        drawn = _event(r)
        if drawn is None:
            continue
        lane, label, show_hash, detail = drawn
        t = (int(e.at_ns) - t0) // 1000
        # Receipts and observations carry their full line digest (to find them in the journal);
        # lifecycle states a 16-hex prefix, enough to tell lines apart in one attempt.
        digest = e.line_digest[7:] if show_hash else ""
        if r.type == "lifecycle":
            digest = digest[:16]
        events.append([t, lane, label, digest, detail, 0])
        if r.type == "lifecycle":
            if r.state == "injected" and window[0] is None:
                window[0] = t
            elif r.state in ("recovered", "released") and window[0] is not None:
                window[1] = window[1] if window[1] is not None else t
        elif r.type == "grader_result":
            intended = r.intended_effects
        elif r.type == "attempt_ended":
            ledger_addr = r.ledger
    if outcomes and ledger is not None and ledger_addr:
        data = ledger(ledger_addr)
        if data is not None:
            events.extend(_effects(data, t0, intended))
    events.sort(key=lambda ev: ev[0])  # stable: journal order among equal times
    end = max((ev[0] for ev in events), default=0)
    if window[0] is not None and window[1] is None:
        window[1] = end
    n = getattr(entries[0].record, "attempt", 0)
    return {"n": n, "end": end, "win": window if window[0] is not None else None, "ev": events}


def build_timeline(attempts: list[dict[str, Any]], judged: dict[int, str]) -> CellTimeline:
    """Attempts in order, each with the evaluator's judgment of it ("j"): the lifecycle is the
    runtime's account, and a no-op injector's attempt may say `witnessed` and be judged invalid."""
    drawn = [{**a, "j": judged.get(a["n"], "")} for a in sorted(attempts, key=lambda a: a["n"])]
    last = drawn[-1]["ev"] if drawn else []
    injected = any(ev[1] == FAULT and ev[2] == "injected" for ev in last)
    return CellTimeline(embed_json(drawn), injected)
