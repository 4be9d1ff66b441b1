"""Fuzzed JSON through `bench canonicalize` and `bench digest`: exit 0 or 2, never a traceback;
canonical bytes are a fixed point. A small budget; tests/perf/fuzz_inputs.py runs more."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.hardening.fuzz import check_json, cli, json_bytes


def test_the_check_sees_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b"[1,")
    assert cli("canonicalize", path).exit_code == 2
    assert check_json(path, b'{"b":1,"a":[1.0,2]}') is None
    assert cli("canonicalize", path).stdout_bytes == b'{"a":[1,2],"b":1}'


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(json_bytes())
def test_fuzzed_json_keeps_the_exit_code_contract(tmp_path: Path, data: bytes) -> None:
    problem = check_json(tmp_path / "input.json", data)
    assert problem is None, problem
