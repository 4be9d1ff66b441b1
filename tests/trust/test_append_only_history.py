"""The committed registry and freeze logs only ever grow: in every commit that touches one, the
previous commit's file is a prefix of it, and the working tree extends the last commit.

This is the git anchor for the append-only logs (the signed head is the local one,
runner/evaluator/trust/head.py): a rewrite or truncation that recomputes every hash chain still
shows up here, in any clean clone. It needs the full history (a shallow clone has none to
check), like tests/reproducibility/test_published.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOGS = ("registry/registry.jsonl", "specs/*.freeze.jsonl")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)


def _full_history(repo: Path) -> bool:
    if shutil.which("git") is None:
        return False
    got = _git(repo, "rev-parse", "--is-shallow-repository")
    return got.returncode == 0 and got.stdout.strip() == b"false"


def logged_paths(repo: Path) -> list[str]:
    """Every append-only log that exists now or ever existed in HEAD's history."""
    got = _git(repo, "log", "--format=", "--name-only", "HEAD", "--", *LOGS)
    assert got.returncode == 0, got.stderr.decode()
    ever = {line for line in got.stdout.decode().splitlines() if line}
    now = {str(p.relative_to(repo)) for pattern in LOGS for p in repo.glob(pattern)}
    return sorted(ever | now)


def violations(repo: Path, path: str) -> list[str]:
    """Where the log at `path` did not only grow: commit by commit, then the working tree."""
    found: list[str] = []
    listed = _git(repo, "rev-list", "--reverse", "--topo-order", "HEAD", "--", path)
    assert listed.returncode == 0, listed.stderr.decode()
    previous: tuple[str, bytes] | None = None
    for commit in listed.stdout.decode().split():
        shown = _git(repo, "show", f"{commit}:{path}")
        if shown.returncode != 0:
            found.append(f"{path}: removed in {commit[:12]}")
            previous = None
            continue
        if previous is not None and not shown.stdout.startswith(previous[1]):
            at = _first_difference(previous[1], shown.stdout)
            found.append(
                f"{path}: {commit[:12]} does not extend {previous[0][:12]} (byte {at} differs)"
            )
        previous = (commit, shown.stdout)
    live = repo / path
    if previous is not None:
        if not live.is_file():
            found.append(f"{path}: removed from the working tree")
        elif not live.read_bytes().startswith(previous[1]):
            found.append(f"{path}: the working tree does not extend {previous[0][:12]}")
    return found


def _first_difference(a: bytes, b: bytes) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


@pytest.mark.skipif(not _full_history(ROOT), reason="no full git history (not a full clone)")
def test_committed_logs_only_grow() -> None:
    paths = logged_paths(ROOT)
    assert "registry/registry.jsonl" in paths and "specs/swe-lite.freeze.jsonl" in paths
    problems = [v for p in paths for v in violations(ROOT, p)]
    assert problems == [], problems


# ---------------------------------------------------------------- the check itself can fail


def _commit(repo: Path, path: str, data: bytes, message: str) -> None:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    assert _git(repo, "add", path).returncode == 0
    got = _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
               "commit", "-q", "-m", message)  # fmt: skip
    assert got.returncode == 0, got.stderr.decode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    assert _git(tmp_path, "init", "-q").returncode == 0
    _commit(tmp_path, "registry/registry.jsonl", b'{"n":1}\n', "one")
    _commit(tmp_path, "registry/registry.jsonl", b'{"n":1}\n{"n":2}\n', "two")
    return tmp_path


def test_growth_is_accepted(repo: Path) -> None:
    assert violations(repo, "registry/registry.jsonl") == []


@pytest.mark.parametrize(
    ("data", "named"),
    [(b'{"n":1}\n', "does not extend"), (b'{"n":9}\n{"n":2}\n{"n":3}\n', "does not extend"),
     (b"", "does not extend")],
    ids=["truncated", "rewritten", "emptied"],
)  # fmt: skip
def test_a_commit_that_does_not_extend_is_named(repo: Path, data: bytes, named: str) -> None:
    _commit(repo, "registry/registry.jsonl", data, "bad")
    found = violations(repo, "registry/registry.jsonl")
    assert len(found) == 1 and named in found[0], found
    # ... and a later commit that grows again does not hide it
    _commit(repo, "registry/registry.jsonl", data + b'{"n":4}\n', "more")
    assert violations(repo, "registry/registry.jsonl") == found


def test_a_removed_log_and_an_edited_working_tree_are_named(repo: Path) -> None:
    log = repo / "registry/registry.jsonl"
    log.write_bytes(b'{"n":1}\n')
    assert violations(repo, "registry/registry.jsonl") == [
        "registry/registry.jsonl: the working tree does not extend "
        + _git(repo, "rev-parse", "HEAD").stdout.decode()[:12]
    ]
    assert _git(repo, "rm", "-qf", "registry/registry.jsonl").returncode == 0
    got = _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
               "commit", "-q", "-m", "rm")  # fmt: skip
    assert got.returncode == 0
    assert any("removed in" in v for v in violations(repo, "registry/registry.jsonl"))
    assert "registry/registry.jsonl" in logged_paths(repo)
