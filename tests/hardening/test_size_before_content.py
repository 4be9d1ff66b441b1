"""Size before content (issue 29): a file is refused by its `stat` size against its cap before a
byte of it is read, so a sparse giant costs milliseconds, not a read of gigabytes."""

from __future__ import annotations

import time
from pathlib import Path

from runner.evaluator.core.bounded import GiB
from tests.foundation.helpers import bench, copy_example


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)


def test_a_sparse_giant_in_a_task_tree_is_refused_by_its_size(tmp_path: Path) -> None:
    spec = copy_example(tmp_path)
    assert bench("plan", spec).exit_code == 0  # negative control
    giant = tmp_path / "example-tasks" / "toy-add" / "big.bin"
    _sparse(giant, 4 * GiB)
    start = time.monotonic()
    res = bench("plan", spec)
    took = time.monotonic() - start
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())  # the message may wrap
    assert "big.bin" in out and "past the limit of" in out, out
    assert took < 5, took  # hashing 4 GiB of zeros takes far longer than refusing it


def test_a_task_file_at_the_cap_is_hashed(tmp_path: Path) -> None:
    spec = copy_example(tmp_path)
    _sparse(tmp_path / "example-tasks" / "toy-add" / "small.bin", 1 << 20)
    assert bench("plan", spec).exit_code == 0
