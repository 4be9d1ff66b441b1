"""Using a built subject environment needs no write access
(runner/runtime/subjects/environment.py): a
complete one is returned without taking the build lock, so a non-root user runs what root built;
one that is not built, where this user may not write, is an InputError (exit 2) saying to build
it as root, never a PermissionError traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.core.errors import InputError
from runner.runtime.subjects import environment as subjectenv
from runner.runtime.subjects.environment import LockDenied, ensure_built, sweep_environments
from tests.subjects.test_subjectenv_sweep import _built, _project


def _deny_writes(env_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """env_root read-only for this process: really (chmod) when not root, else by refusing the
    lock file's creation the way the kernel would."""
    env_root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        env_root.chmod(0o555)
        return

    def refuse(path: Any, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(subjectenv, "open", refuse, raising=False)


def test_a_built_environment_is_used_without_the_lock(tmp_path: Path) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    env = _project(root, "agent", "")
    target = _built(env, env_root)
    got = ensure_built(env, root=root, env_root=env_root)
    assert got.path == target and got.digest == env.digest
    assert not (env_root / ".locks").exists()  # no lock was taken, nothing was written


def test_a_built_environment_is_usable_where_this_user_may_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    env = _project(root, "agent", "")
    target = _built(env, env_root)
    _deny_writes(env_root, monkeypatch)
    try:
        assert ensure_built(env, root=root, env_root=env_root).path == target
    finally:
        env_root.chmod(0o755)


def test_an_unbuilt_environment_where_this_user_may_not_write_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    env = _project(root, "agent", "")
    _built(env, env_root, marker=False)  # a build that never finished: not usable
    _deny_writes(env_root, monkeypatch)
    try:
        with pytest.raises(InputError) as info:
            ensure_built(env, root=root, env_root=env_root)
    finally:
        env_root.chmod(0o755)
    assert not isinstance(info.value, LockDenied)  # the specific message, not the lock's
    msg = info.value.message
    assert "'subjects/agent' is not built" in msg and "permission denied" in msg
    assert "bench subjects build subjects/agent" in msg


def test_sweeping_where_this_user_may_not_write_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, env_root = tmp_path / "checkout", tmp_path / "envs"
    _built(_project(root, "agent", ""), env_root, marker=False)
    _deny_writes(env_root, monkeypatch)
    try:
        with pytest.raises(LockDenied, match="permission denied"):
            sweep_environments(env_root=env_root, root=root)
    finally:
        env_root.chmod(0o755)
