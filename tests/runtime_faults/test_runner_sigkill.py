"""SIGKILL the runner mid-attempt, then sweep that run: nothing of it remains, nothing else goes.

The attempt runs in a child Python process; once its subject is running (it lingers after two
tool calls), the child is SIGKILLed: no teardown of any kind runs. `sweep(run_id)` must then
remove the run's namespace, veth, nft table, container, podman service and subject process,
and leave the host's own nft tables and links, a decoy netns and decoy containers alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.runtime.host import naming, netns, nft, paths
from runner.runtime.sweep import _alive, _marker, sweep

pytestmark = pytest.mark.runtime

CHILD = """
import sys
from pathlib import Path

from runner.evaluator.protocol.faultkinds import NETWORK_PARTITION
from runner.runtime.attempt.run import run_attempt
from runner.runtime.attempt.services import RunServices
from runner.runtime.selftest import minimal_subject, selftest_plan
run_id, run_dir, image = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
with RunServices(run_id, run_dir) as s:
    subject = minimal_subject({"AFB_MIN_LINGER": "120"})
    plan = selftest_plan(run_id, run_dir, NETWORK_PARTITION, "real", image,
                         subject=subject)
    run_attempt(plan, s)
"""


def _run_processes(run_id: str) -> list[tuple[int, str]]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            m = _marker(int(entry.name))
            if m is not None and m[0] == run_id and _alive(int(entry.name)):
                out.append((int(entry.name), m[1]))
    return out


def _containers() -> list[str]:
    r = subprocess.run(
        ["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True, check=True
    )
    return sorted((c.get("Names") or [""])[0] for c in json.loads(r.stdout or "[]"))


def _ours(run_id: str, names: list[str]) -> list[str]:
    return [n for n in names if run_id in n]


@pytest.fixture
def decoys(image: str) -> Iterator[dict[str, str]]:
    other = naming.new_run_id()
    names = {
        "container_foreign": f"afbdecoy-{other}",
        "container_other_run": naming.container_name(other, "decoy"),
        "netns": f"afbdecoy-{other}",
    }
    for key in ("container_foreign", "container_other_run"):
        subprocess.run(["podman", "create", "--name", names[key], image, "true"], check=True,
                       capture_output=True)  # fmt: skip
    subprocess.run(["ip", "netns", "add", names["netns"]], check=True)
    try:
        yield names
    finally:
        for key in ("container_foreign", "container_other_run"):
            subprocess.run(["podman", "rm", "-f", names[key]], capture_output=True)
        subprocess.run(["ip", "netns", "del", names["netns"]], capture_output=True)


def test_sweep_after_runner_sigkill(image: str, decoys: dict[str, str]) -> None:
    run_id = naming.new_run_id()
    run_dir = Path(tempfile.mkdtemp(prefix="afb-k-"))
    host_tables, host_links = nft.list_tables(), netns.host_links()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, run_id, str(run_dir), image],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.monotonic() + 60
        while not any(role == "subject" for _, role in _run_processes(run_id)):
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "the subject never started"
            time.sleep(0.1)
        time.sleep(0.5)  # the subject is mid-run: two tool calls done, lingering
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        assert child.returncode == -signal.SIGKILL

        # The crash really left things behind ...
        assert _ours(run_id, netns.list_netns())
        assert _ours(run_id, netns.host_links())
        assert _ours(run_id, _containers())
        assert {role for _, role in _run_processes(run_id)} >= {"subject", "podman-service"}

        report = sweep(run_id)
        assert not report.errors, report
        assert report.netns and report.veths and report.containers and report.processes

        # ... and sweep removed exactly those.
        assert _ours(run_id, netns.list_netns()) == []
        assert _ours(run_id, netns.host_links()) == []
        assert _ours(run_id, _containers()) == []
        assert _run_processes(run_id) == []
        assert nft.list_tables() == host_tables  # the run's table died with its netns
        assert netns.host_links() == host_links
        assert decoys["netns"] in netns.list_netns()
        remaining = _containers()
        assert decoys["container_foreign"] in remaining
        assert decoys["container_other_run"] in remaining
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        sweep(run_id, include_live=True)  # never leave our own leftovers behind
        if not naming.run_is_live(run_id):  # the killed child never removed its lock file
            (paths.LOCK_DIR / f"{run_id}.lock").unlink(missing_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(Path("/var/tmp/afb-subjects") / run_id, ignore_errors=True)
