"""The worker side of a cluster run: one `WorkerRuntime` per Dask worker process.

A worker process runs attempts exactly as a local run does (`runner.runtime.attempt.run`), under
its own run id: every host name it creates (netns, veth, nft table, container, process marker,
state folders) carries that id, so workers and shards on one host never collide, and a worker
that dies leaves leftovers `bench sweep` finds by that id once its liveness lock is gone. Its
scratch evidence lives under /run/afb/sandbox/<worker id>/ (removed on exit, swept after a crash).

`run_attempt_task` is the Dask task: refuse what this worker cannot run (another protocol, spec
or image: `WorkerRefusal`, no attempt began), tell the scheduler the attempt begins (an
acknowledged event: a lost worker's attempt is then known to have begun), run it, and return the
journal and the blobs it references as bytes, deleting them from scratch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.evaluator.core.canonical import canonical_bytes, sha256_digest
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.environment.artifact import ExecutionEnvironment
from runner.evaluator.evidence.journal import BLOBS, EvidenceStore, read_journal
from runner.evaluator.evidence.records import blob_refs
from runner.evaluator.protocol.matrix import Cell
from runner.runtime.attempt.api import AttemptPlan
from runner.runtime.attempt.services import RunServices
from runner.runtime.executor import MatrixRun
from runner.runtime.host import naming, paths
from runner.runtime.prepared import SpecSource, parse_spec, prepare, read_spec_bytes
from runner.runtime.sandbox import registry
from runner.scale.cluster_bundle import AttemptBundle, AttemptRequest, WorkerRefusal

STARTED_TOPIC = "afb-attempt-started"


@dataclass
class _Protocol:
    mrun: MatrixRun
    cells: dict[str, Cell]
    image: str
    environment: bytes
    environment_hash: str


WORKER_IDS_VAR = "AFB_WORKER_IDS"  # a folder where `bench worker`'s processes leave their ids


def register_worker_id(worker_id: str) -> None:
    """Tell the `bench worker` parent this process's id: at exit it sweeps what a worker process
    killed mid-teardown (Dask's Nanny kills one that takes too long to close) left behind."""
    folder = os.environ.get(WORKER_IDS_VAR)
    if folder and Path(folder).is_dir():
        (Path(folder) / naming.check_run_id(worker_id)).touch()


SANDBOX_VAR = "AFB_WORKER_SANDBOX"  # the sandbox backend a worker's attempts run on


def scratch_dir(worker_id: str) -> Path:
    # Under the run's sandbox-backend folder: removed with it on exit, swept by id after a crash.
    return paths.SANDBOX_ROOT / naming.check_run_id(worker_id) / "scratch"


class WorkerRuntime:
    """Run services (liveness lock, the sandbox backend's service, reaper) for this worker's
    life."""

    def __init__(self, sandbox_backend: str | None = None) -> None:
        # `bench worker --sandbox NAME` hands its choice to the worker processes it starts.
        sandbox_backend = sandbox_backend or os.environ.get(SANDBOX_VAR) or registry.DEFAULT
        self.worker_id = naming.new_run_id()
        self.services = RunServices(
            self.worker_id, scratch_dir(self.worker_id), sandbox_backend=sandbox_backend
        )
        self.scratch = self.services.run_dir
        self._lock = threading.Lock()  # one attempt at a time: scratch holds one attempt
        self._protocols: dict[tuple[str, str], _Protocol] = {}
        self._open = False
        self.store: EvidenceStore

    def open(self) -> WorkerRuntime:
        if not self._open:
            self.services.__enter__()
            self.store = self.services.evidence
            self._open = True
            register_worker_id(self.worker_id)
        return self

    def _run_attempt(self, plan: AttemptPlan) -> None:
        from runner.runtime.attempt.run import run_attempt

        run_attempt(plan, self.services)

    def _use_contracts(self, proto: _Protocol) -> None:
        """The attempt's witnesses are judged by its protocol's contracts (equal to the
        coordinator's: they are bound into the protocol hash the worker matched)."""
        self.services.contracts = dict(proto.mrun.rp.contract_map())

    def close(self) -> None:
        if self._open:
            self._open = False
            self.services.__exit__(None, None, None)

    # -------------------------------------------------------------------------------- protocol

    def _protocol(self, req: AttemptRequest) -> _Protocol:
        key = (req.spec_path, req.protocol_hash)
        if key in self._protocols:
            return self._protocols[key]
        from runner.benchmarks.registry import workload_for
        from runner.imagebuild import builder as images
        from runner.runtime import envcollect

        try:
            source = _same_spec(req)
            if source is None:
                raise WorkerRefusal(
                    f"worker {self.worker_id}: no spec {req.spec_path} (or specs/{req.spec_name})"
                    f" with digest {req.spec_digest} on this host"
                )
            workload = workload_for(source.spec, source.path)
            prepared = prepare(source, freeze=False)  # the coordinator holds the freeze record
            mrun = MatrixRun.for_worker(
                prepared, self.scratch, self.worker_id, workload, req.protocol_hash
            )
        except InputError as exc:
            raise WorkerRefusal(f"worker {self.worker_id}: {exc.render()}") from None
        image_dir = project_root() / "images" / workload.image
        built = images.built_image(image_dir, self.services.backend.images())
        if built is None or built.tag != req.image:
            have = built.tag if built is not None else f"no image for {image_dir}"
            raise WorkerRefusal(
                f"worker {self.worker_id}: the run uses image {req.image}, this host has {have}"
            )
        env = _host_environment(req.spec_digest)
        if env is None:  # no `bench worker` parent observed it: observe it here
            with _calibration_lock():
                env = envcollect.observe(mrun.spec, image=built.tag)
        proto = _Protocol(
            mrun,
            {c.cell_id: c for c in mrun.cells()},
            built.tag,
            canonical_bytes(env.to_json()),
            env.execution_environment_hash,
        )
        self._protocols[key] = proto
        return proto

    # --------------------------------------------------------------------------------- attempt

    def run(self, req: AttemptRequest, announce: Any, address: str) -> AttemptBundle:
        """Run one attempt; `announce()` returns once the scheduler knows it begins."""
        with self._lock:
            self.open()
            proto = self._protocol(req)
            cell = proto.cells.get(req.cell_id)
            if cell is None:
                raise WorkerRefusal(f"cell {req.cell_id} is not in protocol {req.protocol_hash}")
            plan = proto.mrun.plan(cell, req.attempt, proto.image)
            journal = proto.mrun.journal_path(cell, req.attempt)
            if journal.exists():  # a leftover of an attempt this process never returned
                journal.unlink()
            self._use_contracts(proto)
            announce()
            t0 = time.monotonic_ns()
            self._run_attempt(plan)
            wall = time.monotonic_ns() - t0
            data, blobs = self._collect(journal)
            return AttemptBundle(
                protocol_hash=req.protocol_hash,
                cell_id=req.cell_id,
                attempt=req.attempt,
                worker_id=self.worker_id,
                worker_address=address,
                pid=os.getpid(),
                journal=data,
                blobs=blobs,
                environment=proto.environment,
                environment_hash=proto.environment_hash,
                attempt_wall_ns=wall,
                finished_at_ns=time.time_ns(),
            )

    def _collect(self, journal: Path) -> tuple[bytes, dict[str, bytes]]:
        """The journal's bytes and the blobs it references; both leave the scratch folder."""
        data = journal.read_bytes()
        refs = set()
        for e in read_journal(journal):
            refs.update(blob_refs(e.record))
        blobs = {a: self.store.get_blob(a) for a in sorted(refs)}
        journal.unlink()
        for p in (self.scratch / BLOBS).iterdir():
            p.unlink()
        return data, blobs


def _same_spec(req: AttemptRequest) -> SpecSource | None:
    """The spec the coordinator's run was made from, as read on this host: at the path the
    coordinator names, else at specs/<its name> in this checkout; each file read once (bounded)
    and kept only when its bytes have the run's digest. None when neither has them."""
    for path in (Path(req.spec_path), project_root() / "specs" / req.spec_name):
        try:
            data = read_spec_bytes(path)
        except InputError:
            continue  # missing, not a regular file, too big: not the run's spec
        if sha256_digest(data) == req.spec_digest:
            return SpecSource(path, data, parse_spec(data, path))
    return None


def _host_environment(spec_digest: str) -> ExecutionEnvironment | None:
    """The environment the `bench worker` parent observed for this spec (worker_host)."""
    import json

    from runner.evaluator.core.canonical import parse_json
    from runner.evaluator.environment.artifact import load_environment
    from runner.scale.worker_host import HOST_ENVIRONMENT_VAR

    path = os.environ.get(HOST_ENVIRONMENT_VAR)
    if not path or not Path(path).is_file():
        return None
    text = json.loads(Path(path).read_text()).get(spec_digest)
    return load_environment(parse_json(text.encode())) if text else None


@contextlib.contextmanager
def _calibration_lock() -> Iterator[None]:
    """Worker processes of one host observe their environment one at a time: a calibration is
    not measured against another's."""
    paths.LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.LOCK_DIR / "calibration.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_RUNTIME: WorkerRuntime | None = None
_RUNTIME_LOCK = threading.Lock()


def runtime(kind: type[WorkerRuntime] | None = None) -> WorkerRuntime:
    """This process's runtime (made on first use when no preload made it)."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is None:
            _RUNTIME = (kind or WorkerRuntime)()
        return _RUNTIME


def close_runtime() -> None:
    global _RUNTIME
    with _RUNTIME_LOCK:
        rt, _RUNTIME = _RUNTIME, None
    if rt is not None:
        rt.close()


def announce_start(key: str, **fields: Any) -> None:
    """Tell the scheduler (and so the coordinator) that the attempt of task `key` begins; returns
    once the scheduler has it, so a worker that dies after this had begun the attempt."""
    from distributed import get_worker
    from distributed.utils import sync

    worker = get_worker()
    msg = {"key": key, "worker": worker.address, **fields}
    sync(worker.loop, worker.scheduler.log_event, topic=STARTED_TOPIC, msg=msg)


def run_attempt_task(req: AttemptRequest, kind: type[WorkerRuntime] | None = None) -> AttemptBundle:
    """The Dask task of one attempt (see the module docstring)."""
    from distributed import get_worker

    worker = get_worker()
    key = str(worker.get_current_task())
    rt = runtime(kind)
    return rt.run(
        req,
        lambda: announce_start(key, worker_id=rt.worker_id, pid=os.getpid()),
        worker.address,
    )
