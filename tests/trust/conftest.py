"""One throw-away signing key for the trust tests, trusted through the environment, and signed
evaluated runs built once per session and copied per test."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import evaluator_digest
from tests.evidence.synth import evaluated_run
from tests.keys import TestKey


@pytest.fixture(scope="session")
def session_key(tmp_path_factory: pytest.TempPathFactory) -> TestKey:
    return TestKey.create(tmp_path_factory.mktemp("afb-test-key"))


@pytest.fixture
def key(session_key: TestKey, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestKey]:
    for name, value in session_key.env().items():
        monkeypatch.setenv(name, value)
    yield session_key


@pytest.fixture
def other_key(tmp_path: Path) -> TestKey:
    """A key nobody trusts."""
    return TestKey.create(tmp_path / "other-key")


def _duplicates_every_third(i: int, _slot: object) -> str:
    return "duplicate" if i % 3 == 0 else "completed"


OUTCOMES: dict[str, str | Callable[[int, object], str]] = {
    "publishable": _duplicates_every_third,  # a and b publishable, b duplicates
    "b-ineligible": "noop",  # b's injections never witnessed: incomplete evidence
}


@pytest.fixture(scope="session")
def _runs(tmp_path_factory: pytest.TempPathFactory, session_key: TestKey) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("afb-trust-runs")
    made = {}
    for name, b in OUTCOMES.items():
        run = evaluated_run(root / f"{name}-unsigned", b, evaluator_digest())  # type: ignore[arg-type]
        shutil.rmtree(run / "signatures", ignore_errors=True)  # if a session key signed it
        made[f"{name}-unsigned"] = run
        signed = root / name
        shutil.copytree(run, signed)
        made[name] = session_key.sign(signed)
    return made


@pytest.fixture
def make_run(_runs: dict[str, Path], tmp_path: Path) -> Callable[..., Path]:
    """A fresh copy of a session run: make_run("publishable" | "b-ineligible", signed=True)."""
    count = iter(range(1000))

    def make(kind: str = "publishable", signed: bool = True) -> Path:
        name = kind if signed else f"{kind}-unsigned"
        copy = tmp_path / f"{name}-{next(count)}"
        shutil.copytree(_runs[name], copy)
        return copy

    return make
