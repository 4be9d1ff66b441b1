"""A real local Dask cluster: a `dask scheduler` and two `bench worker` processes on this host.

- swe-lite-smoke run through the cluster gives every cell the deterministic projection a local
  `--jobs 1` run gives, and `bench verify` passes on it;
- a worker SIGKILLed mid-attempt: the run still finishes, the lost attempt is in the evidence
  with its cause (HARNESS_INVALID, stage worker_lost), the attempt policy retried the cell, and
  after `bench sweep --run <that worker>` nothing of the killed worker is left on the host.

Real parts: scheduler, workers (Nanny processes), attempts (netns, nft, Podman), signals.
Run serialized: `flock /tmp/afb/runtime.lock .venv/bin/pytest tests/scale/test_cluster_runtime.py`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.journal import EvidenceStore, read_journal
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.evidence.records import HarnessError
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.publish.reproduce import projection
from runner.evaluator.verdict.eligibility import evaluate_run
from runner.runtime.attempt.api import journal_name
from runner.runtime.host import naming, netns, nft, paths
from runner.runtime.host.procs import SUBJECT_ROLE
from runner.scale.worker_runtime import STARTED_TOPIC

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"
BIN = Path(sys.executable).parent
BENCH = str(BIN / "bench")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "cluster runtime tests need root"
    for tool in ("podman", "nft", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (run scripts/setup-runtime.sh)"
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tcp address of a scheduler with two `bench worker` processes (NETNS=1 each)."""
    if reason := _missing():
        pytest.skip(reason)
    from distributed import Client

    logs = tmp_path_factory.mktemp("cluster-logs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    files = contextlib.ExitStack()
    procs = [
        subprocess.Popen(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            env=env,
            stdout=files.enter_context(open(logs / "scheduler.log", "wb")),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        BENCH,
                        "worker",
                        "--scheduler",
                        address,
                        "--spec",
                        str(SMOKE),
                        "--resources",
                        "NETNS=1",
                    ],
                    stdout=files.enter_context(open(logs / f"worker{i}.log", "wb")),  # noqa: SIM115
                    stderr=subprocess.STDOUT,
                )
            )
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=180)
        yield address
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(90)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        files.close()


def _bench(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _projections(run_dir: Path) -> dict[str, list[bytes]]:
    results = evaluate_run(
        read_protocol(run_dir),
        LoadedEvidence.from_store(EvidenceStore(run_dir)),
        evaluator_digest(),
    )
    return {s: projection(r.terminal_records) for s, r in results.items()}


def test_the_cluster_run_projects_like_a_local_run_and_verifies(
    cluster: str, tmp_path: Path
) -> None:
    local = _bench("run", str(SMOKE), "--draft", "--jobs", "1", "--out", str(tmp_path / "local"))
    assert local.returncode in (0, 3), local.stderr[-3000:]
    remote = _bench(
        "run",
        str(SMOKE),
        "--draft",
        "--out",
        str(tmp_path / "cluster"),
        "--cluster",
        cluster,
        "--resources",
        "NETNS=1",
    )
    assert remote.returncode in (0, 3), remote.stdout[-3000:] + remote.stderr[-3000:]
    assert "on 2 workers" in remote.stdout
    a, b = _run_dir(tmp_path / "local"), _run_dir(tmp_path / "cluster")
    pa, pb = _projections(a), _projections(b)
    assert sorted(pa) == sorted(pb) and sum(len(v) for v in pb.values()) == 20
    for subject in pa:
        assert pa[subject] == pb[subject], subject
    verify = _bench("verify", str(b))
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    # the coordinator wrote every journal; workers wrote nothing into the run directory
    assert not list(b.rglob("*.incoming"))


def _ours(worker_id: str) -> list[str]:
    """Everything on this host named after a worker id (what sweep must leave nothing of)."""
    found = [
        f"netns {n}"
        for n in netns.list_netns()
        if naming.parse_as("netns", n) and naming.parse_as("netns", n).run_id == worker_id
    ]  # type: ignore[union-attr]
    found += [
        f"veth {v}"
        for v in netns.host_links()
        if (p := naming.parse_as("veth", v)) and p.run_id == worker_id
    ]
    found += [
        f"nft {t}"
        for _, t in nft.list_tables()
        if (p := naming.parse_as("nft", t)) and p.run_id == worker_id
    ]
    ps = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, check=True
    ).stdout.split()
    found += [f"container {c}" for c in ps if c.startswith(f"afb-{worker_id}-")]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"{naming.ENV_RUN}={worker_id}".encode() in env.split(b"\0"):
            found.append(f"process {pid}")
    found += [
        f"dir {d}"
        for root in (paths.SUBJECT_ROOT, paths.SANDBOX_ROOT)
        if (d := root / worker_id).exists()
    ]
    return found


def _subject_running(worker_id: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"{naming.ENV_RUN}={worker_id}".encode() in env
            and f"{naming.ENV_ROLE}={SUBJECT_ROLE}".encode() in env
        ):
            return True
    return False


def test_a_worker_killed_mid_attempt_is_recorded_retried_and_swept(
    cluster: str, tmp_path: Path
) -> None:
    from distributed import Client

    out = tmp_path / "runs"
    # one shard of smoke (a few cells) is enough to catch an attempt mid-way
    coord = subprocess.Popen(
        [
            BENCH,
            "run",
            str(SMOKE),
            "--draft",
            "--out",
            str(out),
            "--cluster",
            cluster,
            "--resources",
            "NETNS=1",
            "--shard",
            "0/4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killed: dict[str, object] = {}
    with Client(cluster, timeout="60s") as client:
        deadline = time.monotonic() + 600
        while not killed and time.monotonic() < deadline and coord.poll() is None:
            for _, msg in client.get_events(STARTED_TOPIC):
                wid = str(msg.get("worker_id"))
                if _subject_running(wid):  # the attempt's subject is up: truly mid-attempt
                    os.kill(int(msg["pid"]), signal.SIGKILL)
                    killed = dict(msg)
                    break
            time.sleep(0.2)
    stdout, _ = coord.communicate(timeout=1200)
    assert killed, f"no attempt was caught mid-way:\n{stdout[-3000:]}"
    assert coord.returncode == 0, stdout[-3000:]
    assert "shard 0/4" in stdout
    run_dir = _run_dir(out)
    lost = []
    for path in sorted((run_dir / "journals").glob("*-a*.jsonl")):
        for e in read_journal(path):
            if isinstance(e.record, HarnessError) and e.record.stage == "worker_lost":
                lost.append((path, e.record))
    assert len(lost) == 1, lost
    path, record = lost[0]
    assert "KilledWorker" in record.message and str(killed["worker_id"]) in record.message
    # the attempt policy (retry_on HARNESS_INVALID, cap 2) ran the next attempt of that cell
    prefix, n = path.stem.rsplit("-a", 1)
    assert int(n) < 2, "the kill hit a last attempt: nothing to retry"
    retry = path.with_name(f"{prefix}-a{int(n) + 1}.jsonl")
    assert [e.record.type for e in read_journal(retry)][-1] == "attempt_ended"
    # leftovers of the killed worker (its Podman service, sandbox, netns, ...) are swept
    wid = str(killed["worker_id"])
    left = _ours(wid)
    assert left, "the killed worker left nothing: this test would prove nothing about sweep"
    sweep = _bench("sweep", "--run", wid, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    assert _ours(wid) == [], (left, sweep.stdout)


def test_a_coordinator_killed_mid_run_resumes_on_the_cluster(cluster: str, tmp_path: Path) -> None:
    from runner.benchmarks.registry import workload_for
    from runner.runtime.executor import MatrixRun
    from runner.runtime.prepared import SpecSource
    from runner.scale.shard import in_shard

    out = tmp_path / "runs"
    args = ["--draft", "--cluster", cluster, "--resources", "NETNS=1", "--shard", "1/4"]
    coord = subprocess.Popen(
        [BENCH, "run", str(SMOKE), "--out", str(out), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    written: dict[Path, bytes] = {}
    while not written and time.monotonic() < deadline and coord.poll() is None:
        time.sleep(0.2)
        for d in out.glob("*/journals"):
            written = {p: p.read_bytes() for p in d.glob("*-a*.jsonl")}
    assert coord.poll() is None, "the shard finished before the coordinator could be killed"
    coord.send_signal(signal.SIGKILL)
    coord.wait()
    run_dir = _run_dir(out)
    resumed = _bench("run", str(SMOKE), "--resume", str(run_dir), *args)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    for path, data in written.items():  # evidence written before the kill is untouched
        assert path.read_bytes() == data
    source = SpecSource.read(SMOKE)
    mrun = MatrixRun.resume(source, run_dir, workload_for(source.spec, SMOKE))
    states = [s for s in mrun.cell_states() if in_shard(s.cell.cell_id, 1, 4)]
    assert states and all(s.finished for s in states)
    names = {p.stem for p in (run_dir / "journals").glob("*-a*.jsonl")}
    for s in states:  # attempts numbered 1..n, none repeated or skipped
        assert {n for n in range(1, 3) if journal_name(s.cell.cell_id, n) in names} == set(
            range(1, s.attempts_done + 1)
        )
    assert len(names) == sum(s.attempts_done for s in states)
