"""Each task on the host: FAIL_TO_PASS fail and PASS_TO_PASS pass on pristine sources plus
tests.patch; everything passes once gold.patch is applied."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runner.benchmarks.swe_lite.grade import Task, check_task, grade, local_exec
from tests.swelite.conftest import all_tasks


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_task_fail_gold_pass(task: Task, pristine_root: Path) -> None:
    chk = check_task(task, local_exec, str(pristine_root), python=sys.executable)
    assert chk.problems == [], "\n".join([*chk.problems, chk.empty.log if chk.empty else ""])
    assert chk.gold is not None and chk.gold.resolved
    assert chk.empty is not None and not chk.empty.resolved
    assert chk.empty.fail_to_pass["failure"] == list(task.fail_to_pass)


def test_patch_that_does_not_apply(pristine_root: Path) -> None:
    task = all_tasks()[0]
    bogus = b"--- a/nope.py\n+++ b/nope.py\n@@ -1,1 +1,1 @@\n-missing line\n+x\n"
    report = grade(local_exec, task, bogus, src_root=str(pristine_root), python=sys.executable)
    assert not report.patch_applied and not report.resolved
    assert report.fail_to_pass["failure"] == list(task.fail_to_pass)


def test_candidate_cannot_replace_hidden_tests(pristine_root: Path) -> None:
    """Test files that tests.patch touches are reset to pristine before it is applied, so a
    candidate's edits to them (here: one that would break collection) have no effect."""
    task = next(t for t in all_tasks() if t.id == "idna-encode-invalid-bytes")
    first = (pristine_root / task.source.root / "tests/test_idna.py").read_bytes()
    first = first.splitlines(keepends=True)[0]
    cheat = (
        b"--- a/tests/test_idna.py\n+++ b/tests/test_idna.py\n@@ -1,1 +1,2 @@\n"
        + b" "
        + first
        + b"+raise SystemExit(3)\n"
    )
    for candidate, resolved in ((cheat, False), (task.gold_patch + cheat, True)):
        report = grade(
            local_exec, task, candidate, src_root=str(pristine_root), python=sys.executable
        )
        assert report.patch_applied
        assert report.resolved is resolved
        assert report.pass_to_pass["failure"] == []
