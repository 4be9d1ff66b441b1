"""Sweeping built subject environments: what a crashed build left always goes; an environment
whose project changed goes with --subject-envs; a usable one, a folder not named as ours, and
one whose build lock is held are never touched (runner/runtime/subjects/environment.py)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

from runner.runtime.subjects.config import UvEnvironment
from runner.runtime.subjects.environment import MARKER, sweep_environments, target_for
from runner.runtime.subjects.tree import tree_digest

ROOT = Path(__file__).resolve().parents[2]


def _project(root: Path, name: str, body: str) -> UvEnvironment:
    proj = root / "subjects" / name
    proj.mkdir(parents=True)
    (proj / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0"\n{body}')
    (proj / "uv.lock").write_text("version = 1\n")
    return UvEnvironment(project=f"subjects/{name}", digest=tree_digest(proj))


def _built(env: UvEnvironment, env_root: Path, *, marker: bool = True) -> Path:
    target = target_for(env, env_root)
    (target / "venv" / "bin").mkdir(parents=True)
    (target / "venv" / "bin" / "python").write_text("")
    if marker:
        (target / MARKER).write_text(json.dumps({"digest": env.digest, "project": env.project}))
    return target


def test_incomplete_builds_go_usable_ones_stay(tmp_path: Path) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    good = _built(_project(root, "good", ""), env_root)
    crashed = _built(_project(root, "crashed", ""), env_root, marker=False)
    changed_env = _project(root, "changed", "")
    changed = _built(changed_env, env_root)
    (root / changed_env.project / "extra.py").write_text("x = 1\n")  # its project moved on
    gone = _built(_project(root, "gone", ""), env_root)
    (root / "subjects" / "gone" / "pyproject.toml").unlink()
    (root / "subjects" / "gone" / "uv.lock").unlink()
    (root / "subjects" / "gone").rmdir()
    foreign = env_root / "notes"
    foreign.mkdir()

    removed = sweep_environments(env_root=env_root, root=root)
    assert [r.split(":")[0] for r in removed] == [str(crashed)]
    assert "incomplete" in removed[0]
    assert good.is_dir() and changed.is_dir() and gone.is_dir() and foreign.is_dir()

    removed = sweep_environments(stale=True, env_root=env_root, root=root)
    assert sorted(r.split(":")[0] for r in removed) == sorted([str(changed), str(gone)])
    assert all("stale" in r for r in removed)
    assert good.is_dir() and foreign.is_dir()
    assert sweep_environments(stale=True, env_root=env_root, root=root) == []


def test_a_marker_naming_another_digest_is_incomplete(tmp_path: Path) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    env = _project(root, "lying", "")
    target = _built(env, env_root)
    (target / MARKER).write_text(json.dumps({"digest": "sha256:" + "0" * 64, "project": "x"}))
    (removed,) = sweep_environments(env_root=env_root, root=root)
    assert removed.startswith(f"{target}: incomplete") and not target.exists()


def test_a_build_in_progress_is_never_touched(tmp_path: Path) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    env = _project(root, "building", "")
    target = _built(env, env_root, marker=False)  # what a build looks like before its marker
    lock = env_root / ".locks" / f"{target.name}.lock"
    lock.parent.mkdir(parents=True)
    # the lock held by another process, as ensure_built holds it while it builds
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,time\n"
         f"fh=open({str(lock)!r},'w'); fcntl.flock(fh, fcntl.LOCK_EX); print('held', flush=True)\n"
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert sweep_environments(stale=True, env_root=env_root, root=root) == []
        assert target.is_dir()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    with open(lock) as fh:  # released: a sweep may now take it, and removes the crashed build
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fh, fcntl.LOCK_UN)
    (removed,) = sweep_environments(env_root=env_root, root=root)
    assert removed.startswith(str(target)) and not target.exists()


def test_subject_envs_with_one_run_is_an_input_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli.main", "sweep", "--run", "abcdef", "--subject-envs"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--subject-envs" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
