"""Draft diagnostics: what happened in each cell of a draft run, for the person developing an agent.

A draft never mints a scorecard, and the publication boundary seals a subject's per-cell outcomes
until its evidence is complete. That is right for a result, and useless while an agent is being
brought up: an agent that never started (an argv typo, exit 127 at once, no model call) reads
exactly like one that works. So a run whose protocol is *not frozen* gets, beside its (sealed)
results, `results/draft-diagnostics.jsonl` and `.md`: one line per cell that has evidence, with
its status, the grade's effects, its tool and model calls, whether its fault was witnessed, and
each launch's exit and last output lines (the runtime journals them in `subject_exit`).

Every line and the Markdown say "draft: not a result": there is no rate, no aggregate, no
scorecard, and a frozen run never gets these files (a frozen protocol's outcomes stay sealed
until eligible). They are derived from the evidence alone, deterministically, so `bench evaluate`
writes them and `bench verify` re-derives them byte for byte like every other result file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Literal

from pydantic import Field

from runner.evaluator.core.canonical import fast_canonical_bytes
from runner.evaluator.core.types import Frozen
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.evidence.records import HarnessError, SubjectExit
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import Slot, cell_id
from runner.evaluator.protocol.runfile import RunProtocol
from runner.evaluator.protocol.spec import AttemptPolicy
from runner.evaluator.protocol.subjects import MODEL_TOOL
from runner.evaluator.verdict.outcomes import (
    SUBJECT_OUTCOMES,
    AttemptVerdict,
    group_attempts,
    terminal_record,
)

DRAFT_NOTE: Final = "draft: not a result"
DIAGNOSTICS_SCHEMA = "afb.draft-diagnostics/1"
DIAGNOSTICS_FILE = "draft-diagnostics.jsonl"
DIAGNOSTICS_MD = "draft-diagnostics.md"
# A status whose fault (if any) was witnessed: the evaluator grades a faulted attempt only then.
_WITNESSED = frozenset({"COMPLETED", "FAILED"})


class LaunchDiagnostic(Frozen):
    launch: int = Field(description="0 for the first launch, then per relaunch")
    exit_code: int | None
    signal: int | None
    stdout_tail: str | None
    stderr_tail: str | None


class CellDiagnostic(Frozen):
    """One cell of a draft run as its evidence shows it (the terminal attempt's records)."""

    schema_version: Literal["afb.draft-diagnostics/1"] = Field(
        default="afb.draft-diagnostics/1", alias="schema"
    )
    note: Literal["draft: not a result"] = DRAFT_NOTE
    subject_id: str
    cell_id: str
    task_id: str
    fault_id: str
    kind: str
    seed: int
    attempts: int
    status: str | None = Field(description="the evaluator's status of the cell's terminal attempt")
    reasons: list[str]
    trigger_reached: bool | None
    witnessed: bool | None = Field(description="None for a baseline cell (no fault)")
    completed: bool | None
    committed_effects: int | None
    intended_effects: int | None
    tool_calls: int | None = Field(description="calls to the spec's tools (model calls apart)")
    model_calls: int | None
    launches: list[LaunchDiagnostic]
    harness_errors: list[str]


def is_draft(rp: RunProtocol) -> bool:
    """The run's protocol is not frozen (eligibility's own test: a freeze record of this hash)."""
    record = rp.freeze_record
    return record is None or record.protocol_hash != rp.identities.protocol_hash


def diagnose(rp: RunProtocol, evidence: LoadedEvidence) -> Iterator[CellDiagnostic]:
    """Each cell with evidence, in the evidence's cell-id order (a cell that never ran has no
    line: a subset run, `--only`, leaves most of a matrix unrun)."""
    spec = rp.spec()
    registered: dict[str, tuple[str, Slot]] = {
        cell_id(s.slot_id, h): (sid, s)
        for sid, h in rp.identities.subject_config_hashes.items()
        for s in rp.slots
    }
    contracts = rp.contract_map()
    for _, records in evidence.cell_groups():
        by_cell = group_attempts(records)
        exits: dict[tuple[str, int], list[SubjectExit]] = {}
        errors: dict[tuple[str, int], list[str]] = {}
        for _, _, r in records:
            if isinstance(r, SubjectExit):
                exits.setdefault((r.cell_id, r.attempt), []).append(r)
            elif isinstance(r, HarnessError):
                errors.setdefault((r.cell_id, r.attempt), []).append(f"{r.stage}: {r.message}")
        for cid in sorted(by_cell):
            if cid not in registered:
                continue  # an unregistered cell is the proof's business (unregistered_cell)
            subject_id, slot = registered[cid]
            sched = slot.schedule
            t = terminal_record(
                cid, slot.slot_id, subject_id, slot.stratum, sched.kind, sched.parameters,
                by_cell[cid], spec.attempts, contracts.get(sched.kind),
                spec.scoring.scorer_version,
            )  # fmt: skip
            n = _terminal_attempt(t.attempts, spec.attempts)
            a = by_cell[cid].get(n)
            ended = a.ended[0] if a is not None and len(a.ended) == 1 else None
            calls = a.calls[0] if a is not None and len(a.calls) == 1 else None
            model = calls.by_tool.get(MODEL_TOOL, 0) if calls is not None else None
            status = t.status.value if t.status is not None else None
            faulted = sched.kind != NO_FAULT
            yield CellDiagnostic(
                subject_id=subject_id,
                cell_id=cid,
                task_id=slot.task_id,
                fault_id=sched.fault_id,
                kind=sched.kind,
                seed=slot.seed,
                attempts=len(t.attempts),
                status=status,
                reasons=sorted({*t.reasons, *(t.attempts[-1].reasons if t.attempts else [])}),
                trigger_reached=ended.trigger_reached if ended is not None else None,
                witnessed=(status in _WITNESSED) if faulted else None,
                completed=t.completed,
                committed_effects=t.committed_effects,
                intended_effects=t.intended_effects,
                tool_calls=None if calls is None or model is None else calls.calls - model,
                model_calls=model,
                launches=[
                    LaunchDiagnostic(
                        launch=x.restart_index,
                        exit_code=x.exit_code,
                        signal=x.term_signal if x.signaled else None,
                        stdout_tail=x.stdout_tail,
                        stderr_tail=x.stderr_tail,
                    )
                    for x in sorted(exits.get((cid, n), []), key=lambda x: x.restart_index)
                ],
                harness_errors=errors.get((cid, n), []),
            )


def _terminal_attempt(verdicts: list[AttemptVerdict], policy: AttemptPolicy) -> int:
    """The attempt whose status a terminal record carries (`outcomes.terminal_record`'s rule:
    the first final one, else the last)."""
    for v in verdicts:
        if (
            v.status in SUBJECT_OUTCOMES
            or v.status not in policy.retry_on
            or v.attempt >= policy.cap
        ):
            return v.attempt
    return verdicts[-1].attempt if verdicts else 0


def exit_text(launches: list[LaunchDiagnostic]) -> str:
    """Each launch's exit, e.g. "exit 127" or "exit 0, signal 9" (relaunched), or "not launched"."""
    if not launches:
        return "not launched"
    return ", ".join(
        f"signal {x.signal}" if x.signal is not None else f"exit {x.exit_code}" for x in launches
    )


def last_line(launches: list[LaunchDiagnostic]) -> str:
    """The last non-empty stderr line of the last launch (else of its stdout), for a table cell."""
    for x in reversed(launches):
        for text in (x.stderr_tail, x.stdout_tail):
            lines = [ln for ln in (text or "").splitlines() if ln.strip()]
            if lines:
                return lines[-1]
    return ""


def _num(v: object) -> str:
    return "-" if v is None else str(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def diagnostics_md(rows: list[CellDiagnostic], registered: int) -> str:
    out = [
        f"# {DRAFT_NOTE.capitalize()}: per-cell diagnostics",
        "",
        f"**{DRAFT_NOTE}.** The protocol is not frozen: these lines help develop an agent; they "
        "are no rate, no aggregate and no scorecard, and nothing here may be reported as a "
        f"result. {len(rows)} of {registered} registered cells have evidence.",
        "",
        "| subject | task | fault | seed | status | witnessed | effects | tool calls | "
        "model calls | exits | last output line |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        witnessed = "-" if r.witnessed is None else ("yes" if r.witnessed else "no")
        effects = f"{_num(r.committed_effects)}/{_num(r.intended_effects)}"
        out.append(
            f"| {r.subject_id} | {r.task_id} | {r.fault_id} | {r.seed} | {_num(r.status)} | "
            f"{witnessed} | {effects} | {_num(r.tool_calls)} | {_num(r.model_calls)} | "
            f"{exit_text(r.launches)} | `{_cell(last_line(r.launches))}` |"
        )
    for r in rows:
        tails = [x for x in r.launches if x.stderr_tail or x.stdout_tail]
        if not tails and not r.harness_errors and not r.reasons:
            continue
        out += ["", f"## {r.subject_id} · {r.task_id} · {r.fault_id} · seed {r.seed}"]
        if r.reasons:
            out += ["", "reasons: " + ", ".join(f"`{x}`" for x in r.reasons)]
        for e in r.harness_errors:
            out += ["", f"harness error: `{_cell(e)}`"]
        for x in tails:
            for name, text in (("stderr", x.stderr_tail), ("stdout", x.stdout_tail)):
                if text:
                    fence = "````" if "```" in text else "```"
                    out += ["", f"launch {x.launch} {name} (last lines):", fence, text, fence]
    return "\n".join(out) + "\n"


def diagnostics_files(rp: RunProtocol, store: EvidenceStore) -> dict[str, bytes]:
    """results/-relative path -> bytes: the two files for a draft run, nothing for a frozen one.

    Reads the journals once more (a draft is a developer's run, not a million-cell one)."""
    if not is_draft(rp):
        return {}
    rows = sorted(
        diagnose(rp, LoadedEvidence.from_store(store)),
        key=lambda r: (r.subject_id, r.task_id, r.fault_id, r.seed, r.cell_id),
    )
    jsonl = b"".join(
        fast_canonical_bytes(r.model_dump(mode="json", by_alias=True)) + b"\n" for r in rows
    )
    registered = len(rp.slots) * len(rp.identities.subject_config_hashes)
    return {DIAGNOSTICS_FILE: jsonl, DIAGNOSTICS_MD: diagnostics_md(rows, registered).encode()}
