"""Shared fixtures for the swe-lite task set and sandbox image tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.benchmarks.swe_lite.grade import Task, load_tasks
from runner.imagebuild.sources import extract_source, fetch_sources

REPO = Path(__file__).resolve().parents[2]
TASKS_ROOT = REPO / "specs" / "swe-lite"
IMAGE_DIR = REPO / "images" / "swe-lite"


def all_tasks() -> list[Task]:
    return load_tasks(TASKS_ROOT)


def image_tools_missing() -> str | None:
    if os.geteuid() != 0:
        return "image build needs root"
    for tool in ("podman", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    return None


@pytest.fixture(scope="session")
def sdists() -> dict[str, Path]:
    """Pinned sdists from the source cache, fetched with pip on first use."""
    try:
        return fetch_sources(TASKS_ROOT / "sources.toml")
    except RuntimeError as e:  # no pip or no registry: nothing to check against
        pytest.skip(f"cannot fetch task sources: {e}")


@pytest.fixture(scope="session")
def pristine_root(sdists: dict[str, Path]) -> Iterator[Path]:
    """All pinned sdists extracted side by side, as /opt/swe-lite/src is in the image."""
    with tempfile.TemporaryDirectory(prefix="swelite-src-") as tmp:
        for path in sdists.values():
            extract_source(path, Path(tmp))
        yield Path(tmp)
