"""`bench tasks check --sandbox podman`: each task checked in its own sandbox of the swe-lite image.

A real task passes; its copy whose gold patch applies but fixes nothing is named and failed
(exit 3), so the check in the sandbox can fail. Needs root and Podman (the image is built or
loaded as for a run).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.swelite.conftest import TASKS_ROOT, image_tools_missing

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.skipif(image_tools_missing() is not None, reason=str(image_tools_missing())),
]

TASK = "idna-encode-invalid-bytes"


def not_a_fix(gold: str) -> str:
    """A patch that adds a comment between two of the gold patch's own context lines (one of
    context each side: GNU patch anchors a lopsided hunk to the file's start). It applies to idna
    3.3 and touches one file, one line (still "easy" by the bucket rule), so only the fail/pass
    check can catch it."""
    lines = gold.splitlines()
    hunk = next(i for i, ln in enumerate(lines) if ln.startswith("@@"))
    define, first = lines[hunk + 2 : hunk + 4]  # after the hunk's leading blank line
    start = int(lines[hunk].split()[1].lstrip("-").split(",")[0]) + 1
    return "\n".join(
        [
            *lines[:hunk],  # the file header: diff --git, index, ---, +++
            f"@@ -{start},2 +{start},3 @@",
            define,
            "+    # a change that fixes nothing",
            first,
            "",
        ]
    )


def check(root: Path, backend: str, timeout: float) -> subprocess.CompletedProcess[str]:
    bench = Path(sys.executable).parent / "bench"
    argv = [str(bench), "tasks", "check", str(root), "--sandbox", backend]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_sandbox_check_passes_a_task_and_fails_a_non_fix(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    root.mkdir()
    shutil.copy(TASKS_ROOT / "sources.toml", root / "sources.toml")
    shutil.copytree(TASKS_ROOT / TASK, root / TASK)
    broken = root / "idna-not-a-fix"
    shutil.copytree(TASKS_ROOT / TASK, broken)
    toml = (broken / "task.toml").read_text()
    (broken / "task.toml").write_text(toml.replace(f'id = "{TASK}"', 'id = "idna-not-a-fix"', 1))
    (broken / "gold.patch").write_text(not_a_fix((broken / "gold.patch").read_text()))
    proc = check(root, "podman", timeout=900)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert f"ok   {TASK}" in lines, proc.stdout
    assert "FAIL idna-not-a-fix" in lines, proc.stdout
    assert "gold.patch does not resolve" in proc.stdout, proc.stdout
    assert "1 of 2 tasks fail the check" in proc.stderr, proc.stderr


def test_unknown_sandbox_backend_is_named_before_any_work() -> None:
    proc = check(TASKS_ROOT, "nope", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--sandbox 'nope': no such sandbox backend; registered: podman" in proc.stderr
    assert "Traceback" not in proc.stderr
