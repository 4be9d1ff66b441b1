"""`bench run`'s cluster and shard options: a bad value is exit 2 naming the option, and nothing
is created (no run directory, no connection attempt)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"
BENCH = str(Path(sys.executable).parent / "bench")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shard", "4/4"], "--shard"),
        (["--shard", "1/0"], "--shard"),
        (["--shard", "-1/2"], "--shard"),
        (["--shard", "x"], "--shard"),
        (["--resources", "NETNS=1"], "give --cluster"),
        (["--cluster", "127.0.0.1:8786"], "--cluster"),
        (["--cluster", "tcp://127.0.0.1:8786", "--resources", "NETNS"], "--resources"),
        (["--cluster", "tcp://127.0.0.1:8786", "--jobs", "2"], "--jobs"),
    ],
)
def test_bad_cluster_or_shard_options_exit_2_and_create_nothing(
    args: list[str], says: str, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    r = subprocess.run(
        [BENCH, "run", str(SMOKE), "--draft", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_scheduler_there_is_exit_2_before_any_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    address = f"tcp://127.0.0.1:{_free_port()}"
    r = subprocess.run(
        [BENCH, "run", str(SMOKE), "--draft", "--out", str(out), "--cluster", address],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot reach the Dask scheduler" in r.stderr and not out.exists()


def test_a_scheduler_that_would_rerun_a_lost_task_is_refused(tmp_path: Path) -> None:
    """Dask's default re-runs a task whose worker died (allowed_failures 3): an attempt would be
    repeated behind the evaluator's back, so the coordinator refuses that scheduler."""
    import os

    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if "ALLOWED_FAILURES" not in k}
    sched = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "dask"),
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-dashboard",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(address, timeout="60s"):
            pass  # up
        out = tmp_path / "runs"
        r = subprocess.run(
            [BENCH, "run", str(SMOKE), "--draft", "--out", str(out), "--cluster", address],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 2, r.stdout + r.stderr
        assert "allowed_failures = 3" in r.stderr and "ALLOWED_FAILURES=0" in r.stderr
        assert not out.exists()
    finally:
        sched.terminate()
        sched.wait(60)
