"""Random extra entries (files, directories, symlinks in and out, dangling links, FIFOs,
sockets) anywhere in a small synthetic run: `bench verify` exits 3 naming the entry, never a
traceback or a hang. A small budget; tests/perf/fuzz_inputs.py runs more."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.hardening.fuzz import Extra, check_layout, cli, extras
from tests.hardening.runs import evaluated


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fuzz-layout")
    outside = root / "outside.json"
    outside.write_text("{}")
    return evaluated(root / "run").run_dir, outside


def test_the_run_verifies_before_and_after(run: tuple[Path, Path]) -> None:
    assert cli("verify", run[0]).exit_code == 0
    assert check_layout(run[0], Extra("journals", "x.jsonl", "empty"), run[1]) is None
    assert cli("verify", run[0]).exit_code == 0  # the planted entry was removed again


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(extras)
def test_fuzzed_layouts_fail_verify_naming_the_entry(run: tuple[Path, Path], extra: Extra) -> None:
    problem = check_layout(run[0], extra, run[1])
    assert problem is None, problem
