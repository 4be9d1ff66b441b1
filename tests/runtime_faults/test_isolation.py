"""The subject cannot write into the evidence store or forge a receipt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.evidence.records import ActuatorReceipt, HarnessError, WitnessObservation
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.runtime.attempt.api import GradeContext, GradeOutcome, SubjectCommand
from runner.runtime.attempt.run import journal_name, run_attempt
from runner.runtime.attempt.services import RunServices
from runner.runtime.attempt.subject import SUBJECT_UID_BASE
from runner.runtime.selftest import selftest_plan, subject_python

pytestmark = pytest.mark.runtime

HOSTILE = Path(__file__).with_name("hostile_subject.py")
CELL = "sha256:" + "cd" * 32


def _grade(ctx: GradeContext) -> GradeOutcome:
    items, failures = ctx.read_ledger(ctx.scope)
    return GradeOutcome(items == [], 0, len(items or []), shape_ok=not failures)


def test_subject_cannot_write_evidence_or_forge_receipts(services: RunServices, image: str) -> None:
    # An existing, valid journal for the subject to attack (appending would break its chain).
    with services.evidence.journal("target") as j:
        j.append(HarnessError(cell_id=CELL, attempt=1, stage="decoy", message="untouched"))
    journals = services.run_dir / "journals"
    target_bytes = (journals / "target.jsonl").read_bytes()
    subject = SubjectCommand(
        argv=[subject_python(), "-I", str(HOSTILE)],
        env={"AFB_TEST_RUN_DIR": str(services.run_dir), "AFB_TEST_JOURNAL": "target.jsonl"},
    )
    plan = selftest_plan(
        services.run_id, services.run_dir, NO_FAULT, "real", image,
        label="hostile", subject=subject, grade=_grade,
    )  # fmt: skip
    before = sorted(p.name for p in journals.iterdir())
    services.keep_subject_dirs, keep = True, services.keep_subject_dirs
    try:
        result = run_attempt(plan, services)
    finally:
        services.keep_subject_dirs = keep
    assert result.outcome == "subject_finished"

    report = json.loads((services.subject_root / journal_name(plan) / "hostile.json").read_text())
    # a uid of its own per attempt (attempt.subject): not root, not a login or podman id
    assert report["uid"] >= SUBJECT_UID_BASE
    for key in ("append_journal", "create_journal", "list_run_dir", "write_blob"):
        assert report[key] == "PermissionError", report
    assert report["interposer_receipt"] == "404"
    assert report["interposer_witness"] == "404"
    assert report["interposer_call_tool"] == "400"
    assert report["egress_receipt"] == "404"  # the destination knows no such thing

    after = sorted(p.name for p in journals.iterdir())
    assert set(after) - set(before) == {f"{journal_name(plan)}.jsonl"}  # nothing forged
    assert (journals / "target.jsonl").read_bytes() == target_bytes
    assert len(list(read_journal(journals / "target.jsonl"))) == 1  # still verifies
    assert services.run_dir.stat().st_mode & 0o777 == 0o700
    assert services.run_dir.stat().st_uid == 0
    records = [e.record for e in read_journal(journals / f"{journal_name(plan)}.jsonl")]
    assert not [r for r in records if isinstance(r, ActuatorReceipt | WitnessObservation)]
