"""Shards 0/2 and 1/2 of the smoke matrix run for real (`bench run --shard`, at the same time on
this host), merged with `bench merge`, equal the single-host run's deterministic projections,
and the merge evaluates and verifies like a single-host run.

Real Podman, namespaces, nftables and subject processes: run it serialized with the other
runtime tests (`flock /tmp/afb/runtime.lock pytest -m runtime tests/scale`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.publish.reproduce import projection
from runner.evaluator.publish.results import derive

pytestmark = [pytest.mark.runtime, pytest.mark.slow]
SPEC = project_root() / "specs" / "swe-lite-smoke.toml"


def _need_runtime() -> None:
    if os.geteuid() != 0:
        pytest.skip("bench run needs root (Podman, netns, nft)")
    for tool in ("podman", "runc", "nft", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (run scripts/setup-runtime.sh)")


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner.cli.main", *args]


def _run_dir(out: Path) -> Path:
    (only,) = [p for p in out.iterdir() if p.is_dir()]
    return only


def _projections(run_dir: Path) -> dict[str, list[bytes]]:
    _, results, _ = derive(run_dir, evaluator_digest())
    return {s: projection(r.evaluation.terminal_records) for s, r in results.items()}


def test_two_real_shards_merge_into_the_single_run(tmp_path: Path) -> None:
    _need_runtime()
    shards = [
        subprocess.Popen(
            bench(
                "run", str(SPEC), "--draft", "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    for p in shards:
        text, _ = p.communicate(timeout=1800)
        assert p.returncode == 0, text
    single = subprocess.run(
        bench("run", str(SPEC), "--draft", "--out", str(tmp_path / "single")),
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert single.returncode == 3, single.stdout + single.stderr  # a draft: evidence only
    dirs = [_run_dir(tmp_path / f"s{i}") for i in range(2)]
    merged = tmp_path / "merged"
    m = subprocess.run(
        bench("merge", *map(str, dirs), "--out", str(merged)), capture_output=True, text=True
    )
    assert m.returncode == 0, m.stdout + m.stderr
    assert "20 of 20 cells with evidence" in " ".join(m.stdout.split())
    assert _projections(merged) == _projections(_run_dir(tmp_path / "single"))
    ev = subprocess.run(bench("evaluate", str(merged)), capture_output=True, text=True)
    assert ev.returncode == single.returncode, ev.stdout + ev.stderr
    v = subprocess.run(bench("verify", str(merged)), capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    # merging the same shards again refuses the existing output, and two copies of one shard
    # are overlapping shards
    again = subprocess.run(
        bench("merge", *map(str, dirs), "--out", str(merged)), capture_output=True, text=True
    )
    assert again.returncode == 2
    shutil.copytree(dirs[0], tmp_path / "copy")
    twice = subprocess.run(
        bench("merge", str(dirs[0]), str(tmp_path / "copy"), "--out", str(tmp_path / "m2")),
        capture_output=True, text=True,
    )  # fmt: skip
    assert twice.returncode == 2 and "overlapping" in twice.stderr, twice.stderr
