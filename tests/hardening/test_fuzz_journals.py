"""Random byte edits to a small synthetic run's journals (replace, insert, delete, truncate,
duplicate or drop a line): `bench verify` exits 3, never 0 for changed bytes, never a
traceback. A small budget; tests/perf/fuzz_inputs.py runs more."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.hardening.fuzz import Edit, check_journal_edit, cli, edits
from tests.hardening.runs import evaluated

MIXED = ["completed", "failed", "duplicate", "noop", "mismatch", "pre_trigger", "harness"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-journals")
    return evaluated(root / "run", lambda i, s: MIXED[i % len(MIXED)]).run_dir


def test_an_unchanged_journal_verifies_and_a_changed_one_does_not(run: Path) -> None:
    assert check_journal_edit(run, Edit(0, "insert", 0.0, b"")) is None  # no change: exit 0
    assert check_journal_edit(run, Edit(0, "truncate", 0.5, b"x")) is None  # changed: exit 3
    assert cli("verify", run).exit_code == 0  # restored


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(edits)
def test_fuzzed_journal_bytes_fail_verify(run: Path, edit: Edit) -> None:
    problem = check_journal_edit(run, edit)
    assert problem is None, problem
