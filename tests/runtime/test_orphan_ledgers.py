"""A runner killed mid-attempt leaves `RUN_DIR/destination/<journal>.jsonl` (the destination's
ledger, possibly holding committed effects) and perhaps a blob temp file. The next start of the
run archives each ledger into its own attempt's journal and removes the temp files; nothing the
evidence needs is lost and nothing it cannot explain stays. (No root needed: plain files.)"""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.evidence.journal import EvidenceStore, read_journal
from runner.evaluator.evidence.records import AttemptEnded, AttemptStarted, HarnessError
from runner.runtime.attempt.orphans import archive_orphan_ledgers, remove_partial_blobs

CELL = "sha256:" + "ab" * 32
SLOT = "sha256:" + "cd" * 32
LEDGER = b'{"effect":"submit","call_id":"c1"}\n'


def _cut_attempt(run_dir: Path, name: str = "abababababababab-a1", torn: bytes = b"") -> Path:
    store = EvidenceStore(run_dir)
    with store.journal(name) as j:
        j.append(
            AttemptStarted(
                cell_id=CELL, attempt=1, slot_id=SLOT, subject_id="s",
                subject_config_hash=SLOT, fault_id="f", kind="lost_response",
            )
        )  # fmt: skip
        j.append(HarnessError(cell_id=CELL, attempt=1, stage="setup", message="slow"))
    path = run_dir / "journals" / f"{name}.jsonl"
    if torn:
        with open(path, "ab") as fh:
            fh.write(torn)
    (run_dir / "destination").mkdir(exist_ok=True)
    (run_dir / "destination" / f"{name}.jsonl").write_bytes(LEDGER)
    return path


def test_an_orphan_ledger_closes_its_attempt_as_a_blob(tmp_path: Path) -> None:
    path = _cut_attempt(tmp_path)
    store = EvidenceStore(tmp_path)
    assert archive_orphan_ledgers(tmp_path, store) == ["abababababababab-a1"]
    records = [e.record for e in read_journal(path)]
    assert isinstance(records[-2], HarnessError) and records[-2].stage == "interrupted"
    ended = records[-1]
    assert isinstance(ended, AttemptEnded) and ended.outcome == "harness_error"
    assert ended.ledger is not None and store.get_blob(ended.ledger) == LEDGER
    assert not (tmp_path / "destination").exists()


def test_a_torn_tail_is_quarantined_before_the_attempt_is_closed(tmp_path: Path) -> None:
    path = _cut_attempt(tmp_path, torn=b'{"seq":2,"pre')
    archive_orphan_ledgers(tmp_path, EvidenceStore(tmp_path))
    types = [e.record.type for e in read_journal(path)]
    assert types == [
        "attempt_started",
        "harness_error",
        "quarantined_tail",
        "harness_error",
        "attempt_ended",
    ]
    assert (path.parent / f"{path.name}.torn-1").read_bytes() == b'{"seq":2,"pre'


def test_a_ledger_of_a_damaged_journal_stays_for_verify_to_name(tmp_path: Path) -> None:
    path = _cut_attempt(tmp_path)
    # an edited first record: the next line's `prev` no longer matches it
    path.write_bytes(path.read_bytes().replace(b'"subject_id":"s"', b'"subject_id":"t"'))
    assert archive_orphan_ledgers(tmp_path, EvidenceStore(tmp_path)) == []
    assert (tmp_path / "destination" / path.name).read_bytes() == LEDGER


def test_effects_with_no_journal_stay_and_an_empty_ledger_goes(tmp_path: Path) -> None:
    (tmp_path / "destination").mkdir()
    (tmp_path / "destination" / "0000000000000000-a1.jsonl").write_bytes(LEDGER)
    (tmp_path / "destination" / "1111111111111111-a1.jsonl").write_bytes(b"")
    assert archive_orphan_ledgers(tmp_path, EvidenceStore(tmp_path)) == ["1111111111111111-a1"]
    assert [p.name for p in (tmp_path / "destination").iterdir()] == ["0000000000000000-a1.jsonl"]


def test_partial_blob_temp_files_are_removed_and_blobs_kept(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    address = store.put_blob(b"kept")
    tmp = tmp_path / "blobs" / "sha256" / f".{'e' * 64}.123.456.tmp"
    tmp.write_bytes(b"half")
    assert remove_partial_blobs(tmp_path) == [tmp.name]
    assert store.get_blob(address) == b"kept" and not tmp.exists()
