"""Lint, format and strict typing of the evaluator are part of the test command CI runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed")
    return path


def _writable(path: Path) -> bool:
    """Whether this user may write `path` (or create it in its parent)."""
    return os.access(path if path.exists() else path.parent, os.W_OK)


def mypy_cache(tmp_path: Path) -> list[str]:
    """The checkout's incremental cache when this user may write it (fast), else a fresh one
    under tmp_path: a user who only reads the clone (the no-root loop) runs the same check."""
    if _writable(ROOT / ".mypy_cache"):
        return []
    return ["--cache-dir", str(tmp_path / "mypy-cache")]


@pytest.mark.parametrize(
    "args",
    [
        # ruff's cache is per file and cheap to rebuild: never written, so a read-only clone works
        ["ruff", "check", "--no-cache", "."],
        ["ruff", "format", "--no-cache", "--check", "."],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict-evaluator"],
)
def test_tool_passes(args: list[str], tmp_path: Path) -> None:
    extra = mypy_cache(tmp_path) if args[0] == "mypy" else []
    proc = subprocess.run(
        [_tool(args[0]), *args[1:], *extra], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_read_only_checkout_gets_a_private_mypy_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert mypy_cache(tmp_path) == ["--cache-dir", str(tmp_path / "mypy-cache")]
    monkeypatch.setattr(os, "access", lambda path, mode: True)
    assert mypy_cache(tmp_path) == []
