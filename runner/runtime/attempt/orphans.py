"""Destination ledgers left behind by a runner that died mid-attempt.

An attempt's destination writes its ledger to `RUN_DIR/destination/<journal>.jsonl` and the
attempt archives it as a blob referenced by its `attempt_ended` record. A runner killed (SIGKILL,
ENOSPC, power) between the two leaves the ledger behind: the strict run-directory layout refuses
it, and it may hold committed effects, so it must neither stay nor vanish. On the next start of
the run (`--resume`) each orphan is archived into its own attempt's journal: the journal's torn
tail (if any) is quarantined as usual, a `harness_error` (stage `interrupted`) and an
`attempt_ended` (outcome `harness_error`, the ledger as its blob) close the attempt. That is the
status the evaluator already gives a cut-off attempt (HARNESS_INVALID), so no judgement changes;
only the ledger stops being loose.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence.journal import EvidenceStore, read_journal
from runner.evaluator.evidence.records import AttemptEnded, AttemptStarted, HarnessError

DESTINATION = "destination"


def remove_partial_blobs(run_dir: Path) -> list[str]:
    """Blob temp files (`blobs/sha256/.<hex>.<pid>.<tid>.tmp`) of a writer that died before its
    rename: by construction incomplete, never referenced (a record names a blob only after the
    rename), so removing them loses nothing. Called with the run's lock held."""
    removed: list[str] = []
    folder = run_dir / "blobs" / "sha256"
    if folder.is_dir():
        for tmp in folder.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed.append(tmp.name)
    return removed


def archive_orphan_ledgers(run_dir: Path, store: EvidenceStore) -> list[str]:
    """Close every attempt whose destination ledger was left behind; return their names."""
    folder = run_dir / DESTINATION
    if not folder.is_dir():
        return []
    done: list[str] = []
    for ledger in sorted(folder.glob("*.jsonl")):
        name = ledger.name.removesuffix(".jsonl")
        if _close(store, name, ledger):
            done.append(name)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only if empty: a ledger that could not be placed stays, and is named
    return done


def _close(store: EvidenceStore, name: str, ledger: Path) -> bool:
    data = ledger.read_bytes()
    path = store.run_dir / "journals" / f"{name}.jsonl"
    if not path.exists():
        if data:
            return False  # effects with no attempt to own them: left for verify to name
        ledger.unlink()
        return True
    try:
        journal = store.journal(name)  # opening quarantines a torn tail (recorded in it)
        records = [e.record for e in read_journal(journal.path)]
    except EvidenceError:
        return False  # a damaged journal is verify's to name; the ledger stays beside it
    try:
        started = next((r for r in records if isinstance(r, AttemptStarted)), None)
        if any(isinstance(r, AttemptEnded) for r in records) or started is None:
            if started is None and not data:
                ledger.unlink()
                return True
            return False  # not an attempt this can close: left for verify to name
        ref = {"cell_id": started.cell_id, "attempt": started.attempt}
        address = store.put_blob(data)
        journal.append(
            HarnessError(
                **ref,
                stage="interrupted",
                message="the runner stopped mid-attempt; its destination ledger was archived "
                "when the run was next started",
            )
        )
        journal.append(
            AttemptEnded(
                **ref,
                outcome="harness_error",
                trigger_reached=False,
                wall_ns="0",
                detail="interrupted",
                ledger=address,
            )
        )
        ledger.unlink()
        return True
    finally:
        journal.close()
