"""Sweep removes a fake crashed run's leftovers, and nothing else."""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from runner.runtime.host import naming, nft
from runner.runtime.host.netns import AttemptNetwork, host_links, list_netns, remove_netns
from runner.runtime.host.podman_service import PodmanService
from runner.runtime.host.procs import Reaper, SubjectLauncher
from runner.runtime.sandbox.base import SandboxSpec
from runner.runtime.sandbox.podman import PodmanSandbox
from runner.runtime.sweep import sweep

pytestmark = pytest.mark.runtime


def _container_exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name]).returncode == 0


@pytest.fixture
def decoys(test_image: str, run_id: str) -> Iterator[dict[str, str]]:
    """Non-ours resources (and one of another, live-held run) that sweep must not touch."""
    from pyroute2 import netns as pr_netns

    tag = secrets.token_hex(3)
    d = {
        "netns": f"decoy-{tag}",
        "nft": f"decoy_{tag}",
        "container": f"decoy-{tag}",
        "near_miss_nft": f"afb_{tag}x_0",  # looks like ours but does not parse
    }
    pr_netns.create(d["netns"])
    nft.apply_json([{"add": {"table": {"family": "inet", "name": d["nft"]}}}])
    nft.apply_json([{"add": {"table": {"family": "inet", "name": d["near_miss_nft"]}}}])
    subprocess.run(
        [
            "podman",
            "run",
            "-d",
            "--name",
            d["container"],
            "--network",
            "none",
            "--cap-drop",
            "all",
            test_image,
            "sleep",
            "1000",
        ],
        check=True,
        capture_output=True,
    )
    # A process with no marker, and one carrying a *different* run's marker.
    plain = subprocess.Popen(["sleep", "1000"])
    other = subprocess.Popen(["sleep", "1000"], env={"AFB_RUN": run_id, "PATH": "/usr/bin:/bin"})
    other_net = AttemptNetwork(run_id).create()  # the other run holds its lock (fixture)
    d |= {"plain_pid": str(plain.pid), "other_pid": str(other.pid), "other_netns": other_net.netns}
    try:
        yield d
    finally:
        for p in (plain, other):
            p.kill()
            p.wait()
        other_net.close()
        subprocess.run(["podman", "rm", "-f", "-t", "0", d["container"]], capture_output=True)
        for t in (d["nft"], d["near_miss_nft"]):
            with contextlib.suppress(nft.NftError):
                nft.delete_table("inet", t)
        remove_netns(d["netns"])


def test_sweep_removes_only_crashed_run(
    decoys: dict[str, str], test_image: str, tmp_run_dir: Path, reaper: Reaper
) -> None:
    crashed = naming.new_run_id()
    net = AttemptNetwork(crashed)
    svc = PodmanService(crashed, tmp_run_dir)
    sb: PodmanSandbox | None = None
    host_table = naming.nft_table_name(crashed, 7)
    try:
        # --- leftovers of a run that "crashed" (nothing closed) ---
        net.create()
        nft.PartitionTable(crashed, net.index, netns=net.netns).create()  # type: ignore[arg-type]
        nft.apply_json([{"add": {"table": {"family": "inet", "name": host_table}}}])
        svc.start()
        sb = PodmanSandbox(
            svc.url, SandboxSpec(run_id=crashed, name_suffix="tools", image=test_image)
        )
        sb.create()
        sb.start()
        subject = SubjectLauncher(crashed, reaper).launch(
            ["sleep", "1000"], state_dir=tmp_run_dir / "subject", netns=net.netns
        )
        service_pid = svc.pid
        assert service_pid is not None

        # --- a live run is skipped ---
        with naming.hold_run(crashed):
            live = sweep(crashed)
        assert live.skipped_live_runs == [crashed] and not live.removed_anything
        assert net.netns in list_netns()

        # --- the real sweep ---
        report = sweep(crashed)
        assert report.errors == []
        assert report.containers == [sb.name]
        assert report.netns == [net.netns]
        assert report.veths == [net.host_if]
        assert report.nft_tables == [f"inet {host_table}"]
        swept_pids = sorted(int(p.split()[0]) for p in report.processes)
        assert swept_pids == sorted([subject.pid, service_pid])

        assert subject.wait(10).term_signal == signal.SIGKILL
        svc_proc = svc._proc
        assert svc_proc is not None and svc_proc.wait(15) is not None
        assert not _container_exists(sb.name)
        assert net.netns not in list_netns()
        assert net.host_if not in host_links() and net.ns_if not in host_links()
        assert ("inet", host_table) not in nft.list_tables()

        # --- decoys intact ---
        assert decoys["netns"] in list_netns() and decoys["other_netns"] in list_netns()
        tables = nft.list_tables()
        assert ("inet", decoys["nft"]) in tables and ("inet", decoys["near_miss_nft"]) in tables
        assert _container_exists(decoys["container"])
        for key in ("plain_pid", "other_pid"):
            assert psutil.Process(int(decoys[key])).status() != psutil.STATUS_ZOMBIE

        # A second sweep finds nothing.
        assert not sweep(crashed).removed_anything
        subject.close()
    finally:
        # Fallback cleanup if an assertion failed before/after the sweep.
        svc.stop()
        if sb is not None:  # the service may be gone: remove via the CLI
            subprocess.run(["podman", "rm", "-f", "-t", "0", sb.name], capture_output=True)
        net.close()
        with contextlib.suppress(nft.NftError):
            nft.delete_table("inet", host_table)


def test_bench_sweep_prints_every_removed_thing() -> None:
    """A crashed run that left only a subject state directory and its lock file: `bench sweep`
    used to remove both and print nothing (issue 24). Each is named, then a count."""
    from typer.testing import CliRunner

    from runner.cli.main import app
    from runner.runtime.host import paths

    crashed = naming.new_run_id()  # reserved, then released: a run that died
    with naming.hold_run(crashed):
        state = paths.SUBJECT_ROOT / crashed
        state.mkdir(parents=True)
        (state / "stdout.log").write_text("an agent's output\n")
    res = CliRunner().invoke(app, ["sweep", "--run", crashed])
    assert res.exit_code == 0, res.output
    assert f"removed state directory: {state}" in res.output, res.output
    assert f"{crashed}.lock" in res.output and "removed 2 leftover(s)" in res.output, res.output
    assert not state.exists()
    again = CliRunner().invoke(app, ["sweep", "--run", crashed])
    assert again.exit_code == 0 and "nothing to remove" in again.output, again.output


def test_sweep_asks_every_registered_sandbox_backend() -> None:
    """A backend is swept by registering it: its sweep gets the selector, its report is kept."""
    from runner.runtime.sandbox import podman, registry

    crashed, asked = naming.new_run_id(), []

    def fake_sweep(wants: Callable[[str], bool]) -> registry.SweepResult:
        asked.append(wants(crashed))
        return registry.SweepResult([f"fake-{crashed}"], ["one it could not remove"])

    registry.register(
        registry.Backend("fake", podman.PodmanRunService, fake_sweep, podman.PodmanImages, list)
    )
    try:
        report = sweep(crashed)
    finally:
        registry.unregister("fake")
    assert asked == [True]
    assert report.containers == [f"fake-{crashed}"]
    assert report.errors == ["fake: one it could not remove"]
