"""Lint, format and strict typing of the evaluator are part of the test command CI runs."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    "args",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy-strict-evaluator"],
)
def test_tool_passes(args: list[str]) -> None:
    proc = subprocess.run(
        [_tool(args[0]), *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
