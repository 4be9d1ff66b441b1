"""A run whose evidence disk fills up (ENOSPC on a tiny tmpfs): a clear error and exit code, no
traceback; the evidence already written stays intact (every journal line that was written whole
verifies; a torn last line is the only damage, and resume quarantines it); the run directory
copied to a larger disk resumes and finishes; afterwards nothing of the run is left on the host.

Real Podman, namespaces and processes (one shard of the smoke matrix, about a minute): run it
serialized with the other runtime tests (`flock /tmp/afb/runtime.lock`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.protocol.runfile import read_protocol
from runner.runtime.host import netns, nft, paths

pytestmark = pytest.mark.runtime
SPEC = project_root() / "specs" / "swe-lite-smoke.toml"
TINY = "160k"  # holds protocol.json and a few attempts of the shard, not all nine


def _bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner.cli.main", *args]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("enospc")
    tiny = root / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(tiny)], check=True)
    try:
        run = subprocess.run(
            _bench("run", str(SPEC), "--draft", "--shard", "0/2", "--out", str(tiny)),
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        (run_dir,) = list(tiny.iterdir())
        journals = {p.name: p.read_bytes() for p in (run_dir / "journals").iterdir()}
        big = root / "big" / run_dir.name
        shutil.copytree(run_dir, big, symlinks=True)
    finally:
        subprocess.run(["umount", str(tiny)], check=True)
    resume = subprocess.run(
        _bench("run", str(SPEC), "--shard", "0/2", "--resume", str(big)),
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    yield {"run": run, "journals": journals, "big": big, "resume": resume}


def test_a_full_disk_is_a_clear_error(filled: dict[str, object]) -> None:
    run = filled["run"]
    assert isinstance(run, subprocess.CompletedProcess)
    text = run.stdout + run.stderr
    assert run.returncode in (2, 3), text  # an error the user can act on, not exit 1
    assert "Traceback" not in text and "internal error" not in text, text
    assert "No space left on device" in text, text


def test_evidence_written_before_the_disk_filled_is_intact(filled: dict[str, object]) -> None:
    big = filled["big"]
    assert isinstance(big, Path)
    read_protocol(big)  # canonical, whole
    journals = filled["journals"]
    assert isinstance(journals, dict) and any(journals.values())
    for name in journals:
        try:
            for _ in read_journal(big / "journals" / name):
                pass
        except EvidenceError as exc:  # only a torn last line, which resume moves aside
            assert "torn record" in str(exc), (name, str(exc))


def test_resume_on_a_larger_disk_finishes_and_leaves_nothing(filled: dict[str, object]) -> None:
    resume, big = filled["resume"], filled["big"]
    assert isinstance(resume, subprocess.CompletedProcess) and isinstance(big, Path)
    assert resume.returncode == 0, resume.stdout + resume.stderr
    assert "9 cells" in resume.stdout
    run_id = big.name.rsplit("-", 1)[-1]
    assert not [n for n in netns.list_netns() + netns.host_links() if run_id in n]
    assert not [n for _, n in nft.list_tables() if run_id in n]
    ps = subprocess.run(["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True)
    assert not [c for c in json.loads(ps.stdout or "[]") if run_id in c["Names"][0]]
    assert not (paths.LOCK_DIR / f"{run_id}.lock").exists()


def test_the_resumed_run_verifies(filled: dict[str, object]) -> None:
    big = filled["big"]
    assert isinstance(big, Path)
    # a shard run writes evidence only (no results, so nothing is signed): its evidence verifies
    v = subprocess.run(
        _bench("verify", "--allow-unsigned", str(big)), capture_output=True, text=True
    )
    assert v.returncode == 0, v.stdout + v.stderr


def test_a_resume_drops_only_empty_journals(tmp_path: Path) -> None:
    """The empty file a failed first append leaves holds no evidence: a resume removes it (the
    attempt counts as never started); a journal with bytes, even torn ones, is never touched."""
    from runner.runtime.executor import _drop_empty_journals

    journals = tmp_path / "journals"
    journals.mkdir()
    (journals / "a-a1.jsonl").write_bytes(b"")
    (journals / "b-a1.jsonl").write_bytes(b'{"torn')
    (journals / "notes.txt").write_bytes(b"")
    _drop_empty_journals(tmp_path)
    assert sorted(p.name for p in journals.iterdir()) == ["b-a1.jsonl", "notes.txt"]
    assert (journals / "b-a1.jsonl").read_bytes() == b'{"torn'
