"""Read what a report shows from a run directory's plain files, never from publication models.

Inputs: protocol.json (`read_protocol`, which checks its canonical form), results/<subject>/*
as parsed JSON, and the journals (`read_journal`, which checks every chain). The report trusts
the decision already written in results/: a subject is publishable exactly when its
scorecard.json exists. It never re-decides, and for a subject without one it reads nothing
that carries the subject's outcomes (see `timeline.py` for which journal records it keeps).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.evaluator.core.bounded import BLOB_CAP, RESULT_FILE_CAP, read_bounded
from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.evidence.journal import BLOBS, JOURNALS, read_journal
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import Slot, cell_id
from runner.evaluator.protocol.runfile import PROTOCOL_FILE, RunProtocol, read_protocol
from runner.evaluator.publish.diagnostics import DIAGNOSTICS_FILE, CellDiagnostic, is_draft

from .timeline import CellTimeline, attempt_events, build_timeline

RESULTS = "results"


@dataclass
class CellView:
    cell_id: str
    slot: Slot
    # Publishable subjects only: the terminal status, its reasons, duplicates and wall time.
    status: str | None = None
    reasons: list[str] = field(default_factory=list)
    duplicate_effects: int = 0
    wall_ns: int | None = None
    # Incomplete subjects only: the evidence state of cell-history.jsonl (never an outcome).
    evidence_state: str | None = None
    # The evaluator's judgment of each attempt: attempt number -> "STATUS: reasons".
    judged: dict[int, str] = field(default_factory=dict)
    timeline: CellTimeline | None = None

    @property
    def witnessed(self) -> bool:
        """The evaluator accepted the cell's evidence and its fault was injected."""
        accepted = self.evidence_state == "SUBJECT_OUTCOME_SEALED" or self.status in (
            "COMPLETED", "FAILED")  # fmt: skip
        return accepted and self.timeline is not None and self.timeline.injected


@dataclass
class SubjectView:
    subject_id: str
    config_hash: str
    publishable: bool
    evaluated: bool
    proof: dict[str, Any]
    document: dict[str, Any]  # scorecard.json or incomplete-evidence.json ({} if not evaluated)
    cells: list[CellView]
    scheduled_faults: int = 0
    witnessed_faults: int = 0

    @property
    def reason_codes(self) -> list[str]:
        codes = self.proof.get("reason_codes")
        return list(codes) if isinstance(codes, list) else ["not_evaluated"]


@dataclass
class RunView:
    run_dir: Path
    protocol: RunProtocol
    subjects: list[SubjectView]
    comparison: dict[str, Any] | None
    tasks: list[str]  # row order: first appearance in the resolved slots
    kinds: list[str]  # column order: the baseline first, then kinds (fault ids) as registered
    # results/draft-diagnostics.jsonl, when the run is a draft (each line "draft: not a result")
    diagnostics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def frozen(self) -> bool:
        return self.protocol.freeze_record is not None


def _json(path: Path) -> Any:
    try:
        return parse_json(read_bounded(path, RESULT_FILE_CAP, evidence=True))
    except (ValueError, RecursionError) as exc:  # a damaged published file: named, not raised
        raise EvidenceError(f"{path}: not valid JSON: {exc}") from exc


def _jsonl(path: Path) -> list[Any]:
    data = read_bounded(path, RESULT_FILE_CAP, evidence=True)
    out = []
    for n, line in enumerate(data.splitlines(), start=1):
        if line:
            try:
                out.append(parse_json(line))
            except (ValueError, RecursionError) as exc:
                raise EvidenceError(f"{path}: line {n}: not valid JSON: {exc}") from exc
    return out


def read_blob(run_dir: Path, address: str) -> bytes | None:
    """A blob, only if it matches its address (a report shows nothing unverified)."""
    path = run_dir / BLOBS / address.removeprefix("sha256:")
    try:
        data = read_bounded(path, BLOB_CAP, evidence=True)
    except (OSError, EvidenceError):
        return None
    ok = "sha256:" + hashlib.sha256(data).hexdigest() == address
    return data if ok else None


def load_run(run_dir: Path, timelines: bool = True) -> RunView:
    if not (run_dir / PROTOCOL_FILE).is_file():
        raise InputError("not a run directory or bundle (no protocol.json)", file=str(run_dir))
    if not (run_dir / RESULTS).is_dir():
        raise InputError("no results/: run `bench evaluate` first", file=str(run_dir))
    rp = read_protocol(run_dir)
    slots = rp.slots
    tasks = list(dict.fromkeys(s.task_id for s in slots))
    column = column_of(rp)
    kinds = list(dict.fromkeys(column(s) for s in slots))
    kinds.sort(key=lambda k: k != NO_FAULT)  # stable: the baseline column first
    subjects: list[SubjectView] = []
    owner: dict[str, CellView] = {}
    for sid, h in sorted(rp.identities.subject_config_hashes.items()):
        sv = _subject(run_dir / RESULTS / sid, sid, h, slots)
        subjects.append(sv)
        for c in sv.cells:
            owner[c.cell_id] = c
    if timelines:
        _attach_timelines(run_dir, owner, {c.cell_id: sv for sv in subjects for c in sv.cells})
    for sv in subjects:
        faulted = [c for c in sv.cells if c.slot.schedule.kind != NO_FAULT]
        sv.scheduled_faults = len(faulted)
        sv.witnessed_faults = sum(1 for c in faulted if c.witnessed)
    cmp_path = run_dir / RESULTS / "comparison.json"
    comparison = _json(cmp_path) if cmp_path.is_file() else None
    # a frozen run's outcomes stay sealed: a diagnostics file there is not the evaluator's
    diag_path = run_dir / RESULTS / DIAGNOSTICS_FILE
    diagnostics = []
    if is_draft(rp) and diag_path.is_file():
        diagnostics = [CellDiagnostic.model_validate(x).model_dump() for x in _jsonl(diag_path)]
    return RunView(run_dir, rp, subjects, comparison, tasks, kinds, diagnostics)


def column_of(rp: RunProtocol) -> Callable[[Slot], str]:
    """A cell's heatmap column: its fault id when the spec's strata are by fault id (two faults
    of one kind apart), else its fault kind ("none" for the baseline either way)."""
    if "fault_id" in rp.spec().eligibility.strata:
        return lambda slot: slot.schedule.fault_id
    return lambda slot: slot.schedule.kind


def _subject(d: Path, sid: str, h: str, slots: list[Slot]) -> SubjectView:
    cells: dict[str, CellView] = {}
    for s in slots:
        cid = cell_id(s.slot_id, h)
        cells[cid] = CellView(cid, s)
    proof = _json(d / "proof.json") if (d / "proof.json").is_file() else {}
    if (d / "scorecard.json").is_file():
        doc = _json(d / "scorecard.json")
        for row in _jsonl(d / Path(doc["cell_scores"]["file"]).name):
            c = cells.get(row["cell_id"])
            if c is not None:
                c.status, c.duplicate_effects = row["status"], row["duplicate_effects"]
        if (d / "terminal-records.jsonl").is_file():
            for t in _jsonl(d / "terminal-records.jsonl"):
                c = cells.get(t["cell_id"])
                if c is not None:
                    c.reasons, c.wall_ns = list(t.get("reasons", [])), int(t["wall_ns"])
                    c.judged = _judged(t.get("attempts", []))
        return SubjectView(sid, h, True, True, proof, doc, list(cells.values()))
    doc = {}
    if (d / "incomplete-evidence.json").is_file():
        doc = _json(d / "incomplete-evidence.json")
        for row in _jsonl(d / Path(doc["cell_history"]["file"]).name):
            c = cells.get(row["cell_id"])
            if c is not None:
                c.evidence_state, c.reasons = row["state"], list(row["reasons"])
                c.judged = _judged(row.get("attempts", []))
    return SubjectView(sid, h, False, bool(doc), proof, doc, list(cells.values()))


def _judged(attempts: list[dict[str, Any]]) -> dict[int, str]:
    out = {}
    for a in attempts:
        reasons = ", ".join(a.get("reasons", []))
        out[int(a["attempt"])] = a["status"] + (f": {reasons}" if reasons else "")
    return out


def _attach_timelines(
    run_dir: Path, cells: dict[str, CellView], subject_of: dict[str, SubjectView]
) -> None:
    # One journal (= one attempt) at a time, reduced at once to its compact events: a large
    # run's records are never all in memory together.
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((run_dir / JOURNALS).glob("*.jsonl")):
        entries = list(read_journal(path))
        cid = getattr(entries[0].record, "cell_id", None) if entries else None
        if cid not in cells:
            continue
        sv = subject_of[cid]
        ledger = (lambda a: read_blob(run_dir, a)) if sv.publishable else None
        by_cell.setdefault(cid, []).append(attempt_events(entries, sv.publishable, ledger))
    for cid, attempts in by_cell.items():
        cells[cid].timeline = build_timeline(attempts, cells[cid].judged)
