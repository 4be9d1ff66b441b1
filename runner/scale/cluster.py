"""The coordinator of a cluster run: every owed attempt as one Dask task, evidence written here.

`bench run SPEC --cluster tcp://HOST:PORT` connects to a Dask scheduler (never one of ours) and
submits one task per attempt, keyed by run, cell and attempt number, with `retries=0` and the
resources a cell needs (`--resources NETNS=1`: only workers advertising them take it). The
scheduler must not re-run a task whose worker died (`allowed_failures` 0, checked at connect):
an attempt is never silently repeated by the engine.

What comes back is checked and written by `cluster_bundle.admit` (the coordinator is the single
writer of evidence). Which attempt follows is decided as locally: `MatrixRun.attempt_finished`,
i.e. the evaluator's own `attempt_status` under the attempt policy. A worker lost mid-attempt
(KilledWorker: the scheduler saw it die holding the task) is an attempt that began (the worker
told the scheduler so before starting it) and is recorded with its cause, HARNESS_INVALID; a
task lost before its attempt began is submitted again under the same attempt number (up to
MAX_RESUBMISSIONS times; then it is recorded like a lost attempt, so a run always ends). A
bundle the coordinator refuses is recorded the same way (stage `evidence_refused`), never
written. A coordinator killed mid-run continues with `bench run --resume RUN_DIR --cluster ...`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.markup import escape

from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.protocol.matrix import Cell
from runner.runtime.attempt.api import journal_name
from runner.runtime.executor import MatrixRun
from runner.scale.cluster_bundle import (
    AttemptBundle,
    AttemptRequest,
    WorkerRefusal,
    admit,
    recorded_environments,
)
from runner.scale.worker_runtime import STARTED_TOPIC, run_attempt_task

ALLOWED_FAILURES_ENV = "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0"
MAX_RESUBMISSIONS = 3  # a task lost before its attempt began, again and again: then recorded


class ClusterDisplay(Protocol):
    """What the coordinator reports as it goes (the CLI shows it with rich)."""

    def attempt_started(self, worker: str) -> None: ...

    def attempt_done(self, worker: str, cell_finished: bool) -> None: ...


class _NoDisplay:
    def attempt_started(self, worker: str) -> None:
        return None

    def attempt_done(self, worker: str, cell_finished: bool) -> None:
        return None


@dataclass(frozen=True)
class AttemptTiming:
    """One admitted attempt: submit -> journal written (coordinator), and its run on the worker."""

    worker: str
    submit_to_written_s: float
    attempt_wall_s: float
    admit_s: float
    back_s: float  # the worker's bundle made -> journal written here (same-host clocks only)


@dataclass
class ClusterSummary:
    attempts_run: int = 0
    cells: int = 0
    wall_s: float = 0.0
    lost: list[str] = field(default_factory=list)  # journal names recorded as lost / refused
    resubmitted: int = 0  # tasks lost before their attempt began (no attempt, same number)
    timings: list[AttemptTiming] = field(default_factory=list)
    cells_per_worker: Counter[str] = field(default_factory=Counter)


def connect(address: str, timeout_s: float = 30.0) -> Any:
    """A Dask client of the scheduler at `address`, after checking it never re-runs a task."""
    from distributed import Client

    try:
        client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot reach the Dask scheduler: {exc}", key="--cluster") from None
    try:
        allowed = client.run_on_scheduler(_allowed_failures)
    except Exception:
        client.close()
        raise
    if allowed != 0:
        client.close()
        raise InputError(
            f"the scheduler at {address} re-runs a task whose worker died (allowed_failures ="
            f" {allowed}); an attempt must never be repeated behind the evaluator's back: start"
            f" it with {ALLOWED_FAILURES_ENV}",
            key="--cluster",
        )
    return client


def _allowed_failures(dask_scheduler: Any) -> int:
    return int(dask_scheduler.allowed_failures)


def task_key(run_id: str, cell: Cell, attempt: int, resubmission: int = 0) -> str:
    base = f"afb-{run_id}-{journal_name(cell.cell_id, attempt)}"
    return base if resubmission == 0 else f"{base}-r{resubmission}"


@dataclass
class _InFlight:
    cell: Cell
    attempt: int
    submitted: float
    future: Any
    resubmission: int = 0


def execute_on_cluster(
    mrun: MatrixRun,
    image: str,
    client: Any,
    resources: Mapping[str, float] | None = None,
    *,
    select: Callable[[Cell], bool] | None = None,
    display: ClusterDisplay | None = None,
    on_cell_done: Callable[[Cell], None] | None = None,
    task: Callable[[AttemptRequest], AttemptBundle] = run_attempt_task,
    window: int | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> ClusterSummary:
    """Run every owed attempt of the selected cells on the cluster; see the module docstring.

    `window` bounds the tasks submitted and not yet back (default: 2 per worker thread, at
    least 8), so the scheduler holds a window of the matrix, not all of it.
    """
    from distributed import as_completed
    from distributed.client import FutureCancelledError

    show = display or _NoDisplay()
    t0 = time.perf_counter()
    summary = ClusterSummary()
    states = [s for s in mrun.cell_states() if select is None or select(s.cell)]
    summary.cells = len(states)
    cap = mrun.spec.attempts.cap
    queue = [
        (s.cell, s.attempts_done + 1) for s in states if not s.finished and s.attempts_done < cap
    ]
    queue.reverse()  # pop() from the end keeps the executor's cell order
    seen_env = recorded_environments(mrun)
    spec_digest = mrun.prepared.source.digest  # of the bytes read once; the worker checks its own
    threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
    limit = window or max(8, 2 * threads)
    started: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def on_started(event: Any) -> None:
        _, msg = event
        if isinstance(msg, dict) and isinstance(msg.get("key"), str):
            with lock:
                started[msg["key"]] = msg
            show.attempt_started(str(msg.get("worker_id", msg.get("worker", "?"))))

    client.subscribe_topic(STARTED_TOPIC, on_started)
    inflight: dict[str, _InFlight] = {}
    done = as_completed(with_results=False, loop=client.loop)

    def submit(cell: Cell, attempt: int, resubmission: int = 0) -> None:
        req = AttemptRequest(
            run_id=mrun.rp.run_id,
            protocol_hash=mrun.rp.identities.protocol_hash,
            spec_path=str(mrun.spec_path.resolve()),
            spec_name=mrun.rp.spec_name,
            spec_digest=spec_digest,
            cell_id=cell.cell_id,
            attempt=attempt,
            image=image,
        )
        key = task_key(mrun.rp.run_id, cell, attempt, resubmission)
        fut = client.submit(
            task, req, key=key, retries=0, resources=dict(resources or {}) or None, pure=False
        )
        inflight[key] = _InFlight(cell, attempt, time.perf_counter(), fut, resubmission)
        done.add(fut)

    def refill() -> None:
        while queue and len(inflight) < limit:
            submit(*queue.pop())

    def began(key: str) -> dict[str, Any] | None:
        with lock:
            if key in started:
                return started[key]
        for _, msg in client.get_events(STARTED_TOPIC):  # the event may trail the failure
            if isinstance(msg, dict) and msg.get("key") == key:
                return dict(msg)
        return None

    refill()
    try:
        for fut in done:
            key = str(fut.key)
            job = inflight.pop(key)
            cell, n = job.cell, job.attempt
            worker = "?"
            if fut.status == "finished":
                bundle = fut.result()
                worker = bundle.worker_id
                t_admit = time.perf_counter()
                try:
                    admit(bundle, cell, n, mrun, seen_env)
                    now = time.perf_counter()
                    back = time.time_ns() - bundle.finished_at_ns
                    summary.timings.append(
                        AttemptTiming(
                            worker,
                            now - job.submitted,
                            bundle.attempt_wall_ns / 1e9,
                            now - t_admit,
                            back / 1e9,
                        )
                    )
                except EvidenceError as exc:
                    log(f"[bold red]refused[/] {escape(str(exc))}")
                    mrun.record_lost_attempt(cell, n, "evidence_refused", str(exc), 0)
                    summary.lost.append(journal_name(cell.cell_id, n))
            else:
                try:
                    error = fut.exception()
                except FutureCancelledError as cancelled:
                    error = cancelled
                if isinstance(error, WorkerRefusal):
                    raise InputError(f"a worker refused the run: {error}", key="--cluster")
                info = began(key)
                worker = str(info.get("worker_id", "?")) if info else "?"
                if info is None and job.resubmission < MAX_RESUBMISSIONS:
                    # lost before its attempt began (the worker tells the scheduler, and waits
                    # for its answer, before it starts one): nothing ran, the same attempt again
                    why = escape(repr(error))
                    log(f"[yellow]resubmitted[/] {key} (lost before it began: {why})")
                    summary.resubmitted += 1
                    fut.release()
                    submit(cell, n, job.resubmission + 1)
                    continue
                stage = "worker_lost" if type(error).__name__ == "KilledWorker" else "worker_error"
                where = (
                    f"worker {worker} ({info.get('worker')}, pid {info.get('pid')})"
                    if info
                    else f"a worker (never reported it began, {MAX_RESUBMISSIONS + 1} times)"
                )
                message = f"{type(error).__name__}: {error} on {where}"
                mrun.record_lost_attempt(
                    cell, n, stage, message, int((time.perf_counter() - job.submitted) * 1e9)
                )
                summary.lost.append(journal_name(cell.cell_id, n))
                log(f"[yellow]attempt lost[/] {journal_name(cell.cell_id, n)}: {escape(message)}")
            fut.release()
            with lock:
                started.pop(key, None)
            summary.attempts_run += 1
            finished = mrun.attempt_finished(cell, n) or n >= cap
            show.attempt_done(worker, finished)
            if finished:
                summary.cells_per_worker[worker] += 1
                if on_cell_done is not None:
                    on_cell_done(cell)
            else:
                queue.append((cell, n + 1))
            refill()
    finally:
        if inflight:  # interrupted: what has not come back is not evidence (--resume re-runs it)
            client.cancel([j.future for j in inflight.values()])
        client.unsubscribe_topic(STARTED_TOPIC)
    summary.wall_s = time.perf_counter() - t0
    return summary
