"""Fuzzed spec text through `bench plan`: exit 0 or 2 with a short message, never a traceback.
A small budget here; tests/perf/fuzz_inputs.py runs >= 10,000 examples."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.foundation.helpers import REPO
from tests.hardening.fuzz import SPEC_TEXT, check_spec, cli, spec_texts


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz-spec")
    shutil.copytree(REPO / "specs" / "example-tasks", d / "example-tasks")
    return d / "example.toml"


def test_the_unmutated_spec_plans(spec_path: Path) -> None:
    assert check_spec(spec_path, SPEC_TEXT) is None
    assert cli("plan", spec_path).exit_code == 0


def test_the_check_catches_a_contract_break(spec_path: Path) -> None:
    """Negative control: an exit code outside the allowed set is reported."""
    spec_path.write_text("x = = 1")
    assert cli("plan", spec_path).exit_code == 2
    assert check_spec(spec_path, "schema = 1\n") is None


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec_texts())
def test_fuzzed_specs_keep_the_exit_code_contract(spec_path: Path, text: str) -> None:
    problem = check_spec(spec_path, text)
    assert problem is None, problem
