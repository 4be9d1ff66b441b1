"""The matrix executor: every preregistered cell, its attempts under the attempt policy.

It decides *which* attempt runs next, never what an attempt's outcome means: retry decisions
use the evaluator's own `attempt_status` on the attempt's journal, so the executor and the
evaluator cannot disagree about whether a cell is finished. Cells are independent and evidence
is content-addressed per attempt journal, so `--jobs` runs cells in parallel and `--resume`
continues an interrupted run: finished attempts are never repeated, and an attempt that was cut
off mid-way stays in the evidence (as HARNESS_INVALID) and is followed by the next attempt.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import runner.runtime.faults.registry as faults
from runner.evaluator.core.canonical import canonical_bytes, sha256_digest
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.evidence.journal import EvidenceStore, Journal, read_journal
from runner.evaluator.evidence.records import (
    AttemptEnded,
    AttemptStarted,
    EnvironmentRecorded,
    HarnessError,
    RunStarted,
)
from runner.evaluator.protocol.matrix import Cell, Slot
from runner.evaluator.protocol.runfile import (
    PROTOCOL_FILE,
    RunProtocol,
    read_protocol,
    write_protocol,
)
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import spec_base
from runner.evaluator.verdict.outcomes import SUBJECT_OUTCOMES, attempt_status, group_attempts
from runner.runtime.attempt.api import AttemptPlan, journal_name
from runner.runtime.faults.resources import SubjectLimits
from runner.runtime.prepared import PreparedProtocol, SpecSource, for_run
from runner.runtime.subjects.registry import Launch, resolve_subjects
from runner.runtime.workload import TaskViews, Workload


@dataclass(frozen=True)
class CellState:
    cell: Cell
    attempts_done: int
    finished: bool


@dataclass
class RunSummary:
    run_dir: Path
    attempts_run: int
    cells: int
    wall_s: float


def hidden_paths(spec: Spec, spec_path: Path, root: Path | None = None) -> tuple[Path, ...]:
    """What no subject of this spec may see (issue 23: an agent never sees the answer).

    Every task folder (its gold and tests patches), every subject's model cassette folder (the
    model's future answers) and the checkout's `vectors/` (published bundles: the reference
    subjects' journals and ledgers carry the fixes), and the checkout's git objects (every
    committed patch and bundle is in them). Oracle subjects get the same masks: their answer
    comes from AFB_ORACLE_FILE in their state dir. Absolute, resolved, sorted, unique; a folder
    that does not exist is kept (the launcher skips it).
    """
    base = spec_base(spec_path)
    checkout = (root or project_root()).resolve()
    out = {checkout / "vectors"}
    git = git_objects_dir(checkout)
    if git is not None:
        out.add(git)
    for _, task in spec.task_index().values():
        if task.path is not None:
            out.add((base / task.path).resolve())
    for subject in spec.subjects:
        model = subject.config.get("model")
        cassettes = model.get("cassettes") if isinstance(model, dict) else None
        if isinstance(cassettes, str):
            out.add((base / cassettes).resolve())
    return tuple(sorted(out))


def launchers_for(spec: Spec, spec_path: Path, workload: Workload) -> dict[str, Launch]:
    """Every subject resolved (`resolve_subjects`), and every fault checked against every
    subject's limits by its kind (`FaultPlugin.check_subject`, e.g. a freeze longer than the
    subject's time limit): the first problem is an InputError naming the fault's parameter,
    before any run directory or cell exists."""
    launchers = resolve_subjects(spec, spec_path, workload)
    if not spec.faults:
        return launchers
    task_id = min(spec.task_index())  # limits are a subject's config, the same for every task
    for sid, launch in sorted(launchers.items()):
        cmd = launch(TaskViews(task_id, workload))
        limits = SubjectLimits(timeout_s=cmd.timeout_s, max_relaunches=cmd.max_relaunches)
        for i, f in enumerate(spec.faults):
            bad = faults.check_subject(f.kind, f.parameters, limits)
            if bad is not None:
                param, why = bad
                raise InputError(
                    f"fault {f.id!r} ({f.kind}) against subject {sid!r}: {why}",
                    file=str(spec_path),
                    key=f"faults[{i}].parameters.{param}",
                )
    return launchers


def git_objects_dir(checkout: Path) -> Path | None:
    """The folder holding the checkout's git objects: `.git` itself, or for a worktree (whose
    `.git` is a file naming its gitdir) the repository's common dir. None without one."""
    dot = checkout / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return dot
    if not dot.is_file():
        return None
    try:
        line = dot.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = (checkout / line.removeprefix("gitdir:").strip()).resolve()
    common = gitdir / "commondir"
    if common.is_file():
        try:
            gitdir = (gitdir / common.read_text(encoding="utf-8").strip()).resolve()
        except OSError:
            return None
    return gitdir if gitdir.is_dir() else None


def _drop_empty_journals(run_dir: Path) -> None:
    """A journal is created by its first append; when that append never reached the disk (the
    disk was full, the runner died between the create and the write) an empty file is left. It
    holds no evidence (`bench verify` refuses an empty journal), so a resume removes it and the
    attempt counts as never started. Only empty regular files: nothing written is ever touched."""
    journals = run_dir / "journals"
    if not journals.is_dir():
        return
    for name in sorted(os.listdir(journals)):
        path = journals / name
        st = os.lstat(path)
        if name.endswith(".jsonl") and stat.S_ISREG(st.st_mode) and st.st_size == 0:
            path.unlink()


class MatrixRun:
    """One run directory: its protocol, its cells, and the attempts still owed.

    The benchmark is the `workload` (tasks, grading, image); each subject is launched by its
    adapter (`runner.runtime.subjects`), resolved before the run directory exists.
    """

    def __init__(
        self,
        prepared: PreparedProtocol,
        run_dir: Path,
        rp: RunProtocol,
        workload: Workload,
        launchers: dict[str, Launch],
    ) -> None:
        self.prepared = prepared
        self.spec_path = prepared.path
        self.run_dir = run_dir
        self.spec = prepared.spec
        self.rp = rp
        self.workload = workload
        self.launchers = launchers
        self.hidden_paths = hidden_paths(self.spec, self.spec_path)
        self.store = EvidenceStore(run_dir)
        self.slots: dict[str, Slot] = {s.slot_id: s for s in rp.slots}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        prepared: PreparedProtocol,
        out_root: Path,
        run_id: str,
        allow_draft: bool,
        workload: Workload,
        *,
        draft_only: bool = False,
    ) -> MatrixRun:
        """A new run directory under `out_root` holding the prepared protocol's protocol.json.
        `draft_only` (a subset run, `--only`): the run records no freeze even when the spec
        is frozen, so its evidence stays a draft's for good (resumed in full, too)."""
        prepared.require_runnable(allow_draft)
        spec, spec_path = prepared.spec, prepared.path
        launchers = launchers_for(spec, spec_path, workload)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        run_dir = out_root / f"{spec.protocol.id}-{stamp}-{run_id}"
        run_dir.mkdir(parents=True, exist_ok=False)
        os.chmod(run_dir, 0o700)  # evidence is root's: the subject (nobody) cannot write it
        rp = prepared.run_protocol(run_id, draft_only=draft_only)
        write_protocol(run_dir, rp)
        return cls(prepared, run_dir, rp, workload, launchers)

    @classmethod
    def for_worker(
        cls,
        prepared: PreparedProtocol,
        scratch_dir: Path,
        run_id: str,
        workload: Workload,
        protocol_hash: str,
    ) -> MatrixRun:
        """The same run seen from a cluster worker: plans only, evidence into `scratch_dir`.

        Nothing is written here (no protocol.json): the coordinator is the single writer of the
        run directory. The spec must resolve to the coordinator's protocol, else InputError.
        """
        ids = prepared.identities
        if ids.protocol_hash != protocol_hash:
            raise InputError(
                f"this worker resolves the spec to protocol {ids.protocol_hash}, the run is "
                f"under {protocol_hash} (another checkout or evaluator on this worker?)",
                file=str(prepared.path),
            )
        rp = replace(prepared, freeze_record=None).run_protocol(run_id)
        launchers = launchers_for(prepared.spec, prepared.path, workload)
        return cls(prepared, scratch_dir, rp, workload, launchers)

    @classmethod
    def resume(cls, source: SpecSource, run_dir: Path, workload: Workload) -> MatrixRun:
        """Continue the run in `run_dir` under its own protocol.json (contracts, freeze record);
        the spec, read once into `source`, must resolve to the same protocol."""
        if not (run_dir / PROTOCOL_FILE).is_file():
            raise InputError("not a run directory (no protocol.json)", file=str(run_dir))
        rp = read_protocol(run_dir)
        prepared = for_run(source, rp)
        launchers = launchers_for(prepared.spec, prepared.path, workload)
        _drop_empty_journals(run_dir)
        return cls(prepared, run_dir, rp, workload, launchers)

    # ---------------------------------------------------------------------------- evidence

    def record_start(self, environment: dict[str, Any] | None, env_hash: str | None) -> None:
        with self.store.journal("run") as j:
            j.append(
                RunStarted(
                    run_id=self.rp.run_id,
                    spec_path=str(self.spec_path),
                    spec_digest=sha256_digest(self.rp.spec_text.encode()),
                    protocol_hash=self.rp.identities.protocol_hash,
                    protocol_status="frozen" if self.rp.freeze_record else "draft",
                    identities=self.rp.identities.model_dump(mode="json"),
                )
            )
            if environment is not None and env_hash is not None:
                address = self.store.put_blob(canonical_bytes(environment))
                j.append(EnvironmentRecorded(artifact=address, execution_environment_hash=env_hash))

    def record_environment(self, artifact: bytes, env_hash: str) -> None:
        """One more execution environment of this run (a cluster worker's), into run.jsonl."""
        with self.store.journal("run") as j:
            j.append(EnvironmentRecorded(artifact=self.store.put_blob(artifact),
                                         execution_environment_hash=env_hash))  # fmt: skip

    def record_lost_attempt(self, cell: Cell, attempt: int, stage: str, message: str,
                            wall_ns: int) -> Path:  # fmt: skip
        """An attempt that began elsewhere and never came back (its worker died): it stays in
        the evidence as begun, failed at `stage` and ended by the harness, i.e. HARNESS_INVALID
        with its cause, exactly as a local attempt that failed mid-way; the attempt policy then
        decides the retry."""
        slot = self.slots[cell.slot_id]
        ref = {"cell_id": cell.cell_id, "attempt": attempt}
        path = self._journal(cell, attempt)
        if path.exists():
            raise EvidenceError(f"{path}: attempt {attempt} of this cell is already recorded")
        with self.store.journal(path.stem) as j:
            j.append(
                AttemptStarted(
                    **ref,
                    slot_id=cell.slot_id,
                    subject_id=cell.subject_id,
                    subject_config_hash=cell.subject_config_hash,
                    fault_id=slot.schedule.fault_id,
                    kind=slot.schedule.kind,
                )
            )
            j.append(HarnessError(**ref, stage=stage, message=message[:4000]))
            j.append(AttemptEnded(**ref, outcome="harness_error", trigger_reached=False,
                                  wall_ns=str(max(0, wall_ns)), detail=stage))  # fmt: skip
        return path

    def cells(self) -> list[Cell]:
        """Every cell of the run, in execution order."""
        return sorted(
            (c for sid in sorted(self.rp.identities.subject_config_hashes)
             for c in _cells(self.rp, sid)),
            key=lambda c: (c.task_id, c.fault_id, c.seed, c.subject_id),
        )  # fmt: skip

    def journal_path(self, cell: Cell, attempt: int) -> Path:
        return self._journal(cell, attempt)

    def attempt_finished(self, cell: Cell, n: int) -> bool:
        """After attempt `n`: is the cell finished under the attempt policy (evaluator's call)?"""
        return self._finished(cell, n)

    def cell_states(self) -> list[CellState]:
        """Per cell: attempts already in the evidence, and whether the cell is finished."""
        out = []
        for cell in self.cells():
            n = 0
            while self._journal(cell, n + 1).exists():
                n += 1
            out.append(CellState(cell, n, n > 0 and self._finished(cell, n)))
        return out

    def _journal(self, cell: Cell, attempt: int) -> Path:
        return self.run_dir / "journals" / f"{journal_name(cell.cell_id, attempt)}.jsonl"

    def _finished(self, cell: Cell, n: int) -> bool:
        path = self._journal(cell, n)
        try:
            entries = [(path.stem, e.seq, e.record) for e in read_journal(path)]
        except EvidenceError:
            Journal(path).close()  # quarantine a torn tail; the attempt stays in the evidence
            entries = [(path.stem, e.seq, e.record) for e in read_journal(path)]
        grouped = group_attempts(entries).get(cell.cell_id, {})
        if n not in grouped:
            return False
        slot = self.slots[cell.slot_id]
        contract = self.rp.contract_map().get(slot.schedule.kind)
        status, _ = attempt_status(
            grouped[n], slot.schedule.kind, slot.schedule.parameters, contract,
            self.spec.scoring.scorer_version,
        )  # fmt: skip
        policy = self.spec.attempts
        return status in SUBJECT_OUTCOMES or status not in policy.retry_on or n >= policy.cap

    # ------------------------------------------------------------------------------ attempts

    def plan(self, cell: Cell, attempt: int, image: str) -> AttemptPlan:
        slot = self.slots[cell.slot_id]
        launch = self.launchers[cell.subject_id]
        return AttemptPlan(
            run_id=self.rp.run_id,
            run_dir=self.run_dir,
            cell_id=cell.cell_id,
            slot_id=cell.slot_id,
            subject_id=cell.subject_id,
            subject_config_hash=cell.subject_config_hash,
            attempt=attempt,
            task_id=cell.task_id,
            fault_id=slot.schedule.fault_id,
            kind=slot.schedule.kind,
            trigger=slot.schedule.trigger,
            parameters=slot.schedule.parameters,
            image=image,
            subject=launch(TaskViews(cell.task_id, self.workload)),
            grader_id=self.spec.grader.id,
            grader_version=self.spec.grader.version,
            scorer_version=self.spec.scoring.scorer_version,
            grade=self.workload.grader(cell.task_id),
            proxy_tools=dict(self.workload.effect_routes),  # the submit route is the workload's
            hidden_paths=self.hidden_paths,
        )

    def run_cell(
        self,
        state: CellState,
        image: str,
        run_attempt: Callable[[AttemptPlan], Any],
    ) -> int:
        """Run the attempts this cell still owes; returns how many ran."""
        ran = 0
        n = state.attempts_done
        finished = state.finished
        while not finished and n < self.spec.attempts.cap:
            n += 1
            run_attempt(self.plan(state.cell, n, image))
            ran += 1
            finished = self._finished(state.cell, n)
        return ran


def _cells(rp: RunProtocol, subject_id: str) -> list[Cell]:
    from runner.evaluator.protocol.matrix import cells_for

    return list(cells_for(rp.slots, subject_id, rp.identities.subject_config_hashes[subject_id]))


def execute(
    mrun: MatrixRun,
    image: str,
    run_attempt: Callable[[AttemptPlan], Any],
    jobs: int,
    on_cell_done: Callable[[Cell, int], None] | None = None,
    select: Callable[[Cell], bool] | None = None,
) -> RunSummary:
    """Run every unfinished cell (of those `select` keeps) with up to `jobs` in parallel."""
    t0 = time.perf_counter()
    states = [s for s in mrun.cell_states() if select is None or select(s.cell)]
    todo = [s for s in states if not s.finished]
    ran = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(mrun.run_cell, s, image, run_attempt): s for s in todo}
        for fut in as_completed(futures):
            n = fut.result()
            ran += n
            if on_cell_done is not None:
                on_cell_done(futures[fut].cell, n)
    return RunSummary(mrun.run_dir, ran, len(states), time.perf_counter() - t0)
