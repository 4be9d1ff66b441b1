"""The exit-code contract under hostile input: every input mistake is exit 2 (evidence: exit 3)
with one short message naming where, never a traceback (exit 1), never a hang.

Each case is run through the real CLI entry (`bench`, in process); the inputs that could hang a
reader (FIFOs) are also run as a subprocess with a timeout, so a regression fails instead of
blocking the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.evaluator.core.canonical import MAX_DEPTH
from tests.foundation.helpers import EXAMPLE, bench, copy_example
from tests.hardening.runs import evaluated

TEXT = EXAMPLE.read_text("utf-8")
CONFIG = "config = { max_retries = 3 }"


def _spec(tmp_path: Path, text: str) -> Path:
    return copy_example(tmp_path, text)


def _says(res, code: int, *needles: str, limit: int = 4000) -> None:
    out = res.output
    assert res.exit_code == code, out
    assert "Traceback" not in out and "internal error" not in out, out
    assert len(out) < limit, f"{len(out)} characters of output"
    for n in needles:
        assert n in out, out


def _nested_table(depth: int) -> str:
    return "{ a = " * depth + "1" + " }" * depth


def _nested_array(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 2, 200, 500, 1000, 5000])
@pytest.mark.parametrize("shape", ["table", "array"])
def test_deeply_nested_spec_config_is_exit_2(tmp_path: Path, depth: int, shape: str) -> None:
    value = _nested_table(depth) if shape == "table" else _nested_array(depth)
    spec = _spec(
        tmp_path, TEXT.replace(CONFIG, f"config = {{ max_retries = 3, deep = {value} }}", 1)
    )
    _says(bench("plan", spec), 2, "nested")


def test_nesting_just_inside_the_limit_is_accepted(tmp_path: Path) -> None:
    value = _nested_table(MAX_DEPTH - 8)
    spec = _spec(
        tmp_path, TEXT.replace(CONFIG, f"config = {{ max_retries = 3, deep = {value} }}", 1)
    )
    assert bench("plan", spec).exit_code == 0


@pytest.mark.parametrize("depth", [MAX_DEPTH + 2, 1000, 100_000])
@pytest.mark.parametrize("command", ["canonicalize", "digest"])
def test_deeply_nested_json_is_exit_2(tmp_path: Path, depth: int, command: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * depth + "]" * depth)
    _says(bench(command, path), 2, "nested")
    path.write_text('{"a":' * depth + "1" + "}" * depth)
    _says(bench(command, path), 2, "nested")


def test_a_10mb_protocol_id_is_not_echoed_whole(tmp_path: Path) -> None:
    big = "x" * 10_000_000
    spec = _spec(tmp_path, TEXT.replace('id = "example"', f'id = "{big}"', 1))
    _says(bench("plan", spec), 2, "protocol.id", "more characters")


def test_a_10mb_unknown_key_value_is_not_echoed_whole(tmp_path: Path) -> None:
    spec = _spec(tmp_path, TEXT.replace("cap = 3", f'cap = "{"9" * 10_000_000}"', 1))
    _says(bench("plan", spec), 2, "attempts.cap", "more characters")


def test_paths_with_nul_bytes_or_overlong_components(tmp_path: Path) -> None:
    for command in ("canonicalize", "digest", "plan", "verify", "evaluate"):
        _says(bench(command, str(tmp_path / ("a" * 300))), 2)
        _says(bench(command, str(tmp_path) + "/" + "a/" * 3000), 2)
    for rel in ("example-tasks/toy-add\\u0000x", "a" * 300, "x/" * 3000):
        spec = _spec(tmp_path, TEXT.replace('"example-tasks/toy-add"', f'"{rel}"', 1))
        _says(bench("plan", spec), 2, "task_sets[0].tasks[0].path")


def test_symlink_loops(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for command in ("canonicalize", "digest", "plan"):
        _says(bench(command, loop), 2, "loop")
    spec = _spec(tmp_path, TEXT.replace('"example-tasks/toy-add"', '"example-tasks/loop"', 1))
    (tmp_path / "example-tasks" / "loop").symlink_to("loop")
    _says(bench("plan", spec), 2, "task_sets[0].tasks[0].path")


def _no_hang(*args: str | Path, code: int, needle: str, timeout: float = 60) -> None:
    """The real console script in a subprocess: it must answer, not block on a FIFO."""
    res = subprocess.run(
        [sys.executable, "-m", "runner.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr and needle in res.stderr, res.stderr


def test_fifos_as_input_never_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for command in ("canonicalize", "digest", "plan"):
        _no_hang(command, fifo, code=2, needle="FIFO")


def test_a_fifo_inside_a_task_folder_is_exit_2(tmp_path: Path) -> None:
    spec = _spec(tmp_path, TEXT)
    os.mkfifo(tmp_path / "example-tasks" / "toy-add" / "pipe")
    _says(bench("plan", spec), 2, "FIFO", "task_sets[0].tasks[0].path")
    _no_hang("plan", spec, code=2, needle="FIFO")


def test_sparse_2gib_inputs_are_refused_by_size(tmp_path: Path) -> None:
    sparse = tmp_path / "big.json"
    with open(sparse, "wb") as fh:
        fh.truncate(2 << 30)
    for command in ("canonicalize", "digest", "plan"):
        _says(bench(command, sparse), 2, "limit")
    run = evaluated(tmp_path / "run").run_dir
    with open(run / "protocol.json", "r+b") as fh:
        fh.truncate(2 << 30)
    _says(bench("verify", run), 3, "protocol.json", "limit")
    _says(bench("evaluate", run), 3, "protocol.json", "limit")


def test_invalid_utf8_and_binary_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff\xfe"}')
    _says(bench("canonicalize", bad), 2, "bad.json")
    spec = tmp_path / "bad.toml"
    spec.write_bytes(TEXT.encode().replace(b"example", b"ex\xffample", 1))
    _says(bench("plan", spec), 2, "bad.toml")


def test_a_directory_where_a_file_belongs(tmp_path: Path) -> None:
    for command in ("canonicalize", "digest", "plan"):
        _says(bench(command, tmp_path), 2)


def test_evidence_errors_are_exit_3_not_2(tmp_path: Path) -> None:
    run = evaluated(tmp_path / "run").run_dir
    (run / "protocol.json").write_bytes(b"{}")
    _says(bench("evaluate", run), 3, "protocol.json")
    _says(bench("verify", run), 3, "protocol.json")


def _hangs(*args: str | Path) -> bool:
    try:
        _no_hang(*args, code=2, needle="FIFO", timeout=10)
    except subprocess.TimeoutExpired:
        return True
    return False


def test_a_fifo_as_freeze_log_never_blocks(tmp_path: Path) -> None:
    spec = _spec(tmp_path, TEXT)
    os.mkfifo(tmp_path / "example.freeze.jsonl")
    assert not _hangs("plan", spec)


def test_a_fifo_journal_never_blocks_evaluate(tmp_path: Path) -> None:
    run = evaluated(tmp_path / "run").run_dir
    os.mkfifo(run / "journals" / "0123456789abcdef-a1.jsonl")
    # evidence, not input: the layout check names it (exit 3) before any journal is opened
    _no_hang("evaluate", run, code=3, needle="is a FIFO", timeout=30)


def test_a_2gib_sparse_file_inside_a_task_folder_is_exit_2_fast(tmp_path: Path) -> None:
    """Task trees are read bounded (README "Limits"): refused by size from lstat, never read."""
    import time

    spec = _spec(tmp_path, TEXT)
    big = tmp_path / "example-tasks" / "toy-add" / "huge.bin"
    with open(big, "wb") as fh:
        fh.truncate(2 << 30)
    started = time.monotonic()
    _says(bench("plan", spec), 2, "huge.bin", "task_sets[0].tasks[0].path")
    assert time.monotonic() - started < 5
    _no_hang("plan", spec, code=2, needle="huge.bin", timeout=30)
