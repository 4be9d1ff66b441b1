"""What crosses the wire between the coordinator and a cluster worker, and the coordinator's gate.

A worker runs an attempt into its own scratch directory and sends back the attempt's journal and
blobs as bytes (`AttemptBundle`); it never writes the run directory. The coordinator is the one
writer of evidence, and `admit` is the only way a bundle gets there: every check passes on the
bytes in memory (hash chain and canonical form, every record belongs to this protocol, cell and
attempt, every blob matches its address and is one the journal references, the environment
artifact matches its hash) before the first byte is written. A refused bundle is written nowhere.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from runner.evaluator.core.canonical import canonical_bytes, parse_json, sha256_digest
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.types import Digest, Frozen
from runner.evaluator.environment.artifact import load_environment
from runner.evaluator.evidence.journal import JOURNALS, Entry, read_journal
from runner.evaluator.evidence.records import AttemptRef, AttemptStarted, blob_refs
from runner.evaluator.protocol.matrix import Cell
from runner.runtime.executor import MatrixRun

MAX_JOURNAL_BYTES = 64 << 20  # one attempt's journal; far above any real one
MAX_BLOB_BYTES = 256 << 20


class WorkerRefusal(Exception):
    """The worker will not run this request (another protocol, spec or image): no attempt ran."""


class AttemptRequest(Frozen):
    """One attempt of one cell, as the coordinator asks a worker for it."""

    run_id: str = Field(description="the coordinator's run id (task keys, messages)")
    protocol_hash: Digest
    spec_path: str = Field(description="the spec as the coordinator names it")
    spec_name: str
    spec_digest: Digest = Field(description="SHA-256 of the spec text the run was made from")
    cell_id: Digest
    attempt: int = Field(ge=1, le=20)
    image: str = Field(description="the sandbox image tag (it names the image's input digest)")


class AttemptBundle(Frozen):
    """One attempt's evidence as bytes, plus who ran it and how long it took there."""

    protocol_hash: Digest
    cell_id: Digest
    attempt: int = Field(ge=1, le=20)
    worker_id: str
    worker_address: str
    pid: int
    journal: bytes
    blobs: dict[str, bytes]
    environment: bytes = Field(description="the worker's execution-environment artifact")
    environment_hash: Digest
    attempt_wall_ns: int = Field(ge=0, description="the attempt on the worker, end to end")
    finished_at_ns: int = Field(ge=0, description="worker's clock when the bundle was made")


@dataclass(frozen=True)
class Admitted:
    journal: Path
    new_environment: bool
    entries: int


@contextlib.contextmanager
def _in_memory(data: bytes) -> Iterator[Path]:
    """A path reading `data` from an anonymous memory file: checks touch no disk."""
    fd = os.memfd_create("afb-bundle", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as fh:
            fh.write(data)
        yield Path(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def _refuse(bundle: AttemptBundle, why: str) -> EvidenceError:
    return EvidenceError(
        f"bundle from worker {bundle.worker_id} ({bundle.worker_address}) for cell "
        f"{bundle.cell_id} attempt {bundle.attempt} refused: {why}"
    )


def check_bundle(
    bundle: AttemptBundle, protocol_hash: str, cell: Cell, attempt: int, mrun: MatrixRun
) -> list[Entry]:
    """Every check of `admit`, nothing written; returns the journal's verified entries."""
    if bundle.protocol_hash != protocol_hash:
        raise _refuse(bundle, f"made under protocol {bundle.protocol_hash}, not {protocol_hash}")
    if bundle.cell_id != cell.cell_id or bundle.attempt != attempt:
        raise _refuse(bundle, f"asked for cell {cell.cell_id} attempt {attempt}")
    if not bundle.journal or len(bundle.journal) > MAX_JOURNAL_BYTES:
        raise _refuse(bundle, f"journal of {len(bundle.journal)} bytes")
    with _in_memory(bundle.journal) as path:
        try:
            entries = list(read_journal(path))
        except EvidenceError as exc:
            raise _refuse(bundle, str(exc).replace(str(path), "journal")) from None
    slot = mrun.slots.get(cell.slot_id)
    if slot is None:
        raise _refuse(bundle, f"slot {cell.slot_id} is not in this run's protocol")
    referenced: set[str] = set()
    started = 0
    for e in entries:
        r = e.record
        if not isinstance(r, AttemptRef):
            raise _refuse(bundle, f"line {e.seq}: a {type(r).__name__} in an attempt journal")
        if r.cell_id != cell.cell_id or r.attempt != attempt:
            raise _refuse(bundle, f"line {e.seq}: record of cell {r.cell_id} attempt {r.attempt}")
        if isinstance(r, AttemptStarted):
            started += 1
            got = (r.slot_id, r.subject_id, r.subject_config_hash, r.fault_id, r.kind)
            want = (
                cell.slot_id,
                cell.subject_id,
                cell.subject_config_hash,
                slot.schedule.fault_id,
                slot.schedule.kind,
            )
            if got != want:
                raise _refuse(bundle, f"line {e.seq}: attempt_started {got} is not {want}")
        referenced.update(blob_refs(r))
    if started != 1:
        raise _refuse(bundle, f"{started} attempt_started records (one expected)")
    for address, data in bundle.blobs.items():
        if len(data) > MAX_BLOB_BYTES:
            raise _refuse(bundle, f"blob {address} of {len(data)} bytes")
        if sha256_digest(data) != address:
            raise _refuse(bundle, f"blob {address} does not match its address")
    if missing := sorted(referenced - set(bundle.blobs)):
        raise _refuse(bundle, f"referenced blobs missing: {', '.join(missing)}")
    if extra := sorted(set(bundle.blobs) - referenced):
        raise _refuse(bundle, f"blobs no record references: {', '.join(extra)}")
    try:
        env = load_environment(parse_json(bundle.environment))
    except ValueError as exc:
        raise _refuse(bundle, f"environment artifact: {exc}") from None
    if canonical_bytes(env.to_json()) != bundle.environment or not env.verify():
        raise _refuse(bundle, "environment artifact does not match its hash")
    if env.execution_environment_hash != bundle.environment_hash:
        raise _refuse(bundle, "environment hash is not the artifact's")
    return entries


def admit(
    bundle: AttemptBundle,
    cell: Cell,
    attempt: int,
    mrun: MatrixRun,
    seen_environments: set[str],
) -> Admitted:
    """Check the bundle, then write it: blobs, the worker's environment (once), the journal.

    The journal goes last and appears whole (written aside, fsync'd, hard-linked into place),
    so an attempt is in the evidence with everything it references or not at all; an attempt
    already recorded is never overwritten (EvidenceError).
    """
    entries = check_bundle(bundle, mrun.rp.identities.protocol_hash, cell, attempt, mrun)
    final = mrun.journal_path(cell, attempt)
    if final.exists():
        raise _refuse(bundle, f"{final} already exists (evidence is never overwritten)")
    new_env = bundle.environment_hash not in seen_environments
    for data in bundle.blobs.values():
        mrun.store.put_blob(data)
    if new_env:
        mrun.record_environment(bundle.environment, bundle.environment_hash)
        seen_environments.add(bundle.environment_hash)
    folder = mrun.run_dir / JOURNALS
    tmp = folder / f".{final.name}.{os.getpid()}.incoming"
    with open(tmp, "wb") as fh:
        fh.write(bundle.journal)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o600)
    try:
        os.link(tmp, final)  # fails if the journal appeared meanwhile: never overwritten
    except FileExistsError:
        raise _refuse(bundle, f"{final} already exists (evidence is never overwritten)") from None
    finally:
        tmp.unlink()
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return Admitted(final, new_env, len(entries))


def recorded_environments(mrun: MatrixRun) -> set[str]:
    """Environment hashes already in the run's run.jsonl (a resumed run records each once)."""
    from runner.evaluator.evidence.records import EnvironmentRecorded

    path = mrun.run_dir / JOURNALS / "run.jsonl"
    if not path.exists():
        return set()
    return {
        e.record.execution_environment_hash
        for e in read_journal(path)
        if isinstance(e.record, EnvironmentRecorded)
    }
