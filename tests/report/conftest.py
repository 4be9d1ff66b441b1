"""Runs to report on: the published swe-lite bundle (real journals, 4 publishable subjects) and
a synthetic run with one publishable and one incomplete subject (tests/evidence/synth.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from tests.evidence.synth import Run

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "vectors/published/swe-lite-20261201T053408Z-56f397"
INVALID = (12, 13)  # subject b: a no-op injector on these cells keeps it from publishing
MISSING = (4,)  # and this cell never ran


def b_outcomes(outcome: str) -> Callable[[int, object], str | None]:
    def pick(i: int, s: object) -> str | None:
        if i in MISSING:
            return None
        return "noop" if i in INVALID else outcome

    return pick


def build_incomplete(root: Path, b_outcome: str = "completed") -> Path:
    """Subject a publishable (a duplicate effect on every 3rd cell, a failure on every 7th);
    subject b incomplete, every run cell of it ending in `b_outcome`. Fixed clock: two builds
    differ only where their outcomes do."""
    r = Run(root / "run", fixed_clock=True)
    r.fill(
        "a", lambda i, s: "failed" if i % 7 == 3 else ("duplicate" if i % 3 == 0 else "completed")
    )
    r.fill("b", b_outcomes(b_outcome))
    result = CliRunner().invoke(app, ["evaluate", str(r.run_dir)])
    assert result.exit_code == 3, result.output  # b is incomplete
    assert (r.run_dir / "results/a/scorecard.json").is_file()
    assert (r.run_dir / "results/b/incomplete-evidence.json").is_file()
    return r.run_dir


@pytest.fixture(scope="session")
def incomplete_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_incomplete(tmp_path_factory.mktemp("incomplete"))


@pytest.fixture(scope="session")
def bundle_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle copied aside, so a default-path write never touches vectors/."""
    dst = tmp_path_factory.mktemp("bundle") / BUNDLE.name
    shutil.copytree(BUNDLE, dst)
    return dst
