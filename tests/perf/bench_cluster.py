"""Cluster benchmark (run on demand; not a test): what Dask adds, and where one coordinator stops.

    # real attempts (root, Podman, netns; serialize with the other runtime users):
    flock /tmp/afb/runtime.lock .venv/bin/python tests/perf/bench_cluster.py real
    # no-op attempts through the real scheduler, workers and coordinator checks:
    .venv/bin/python tests/perf/bench_cluster.py sim --cells 10000 [--cells 100000] [--window 64]

`real`: swe-lite-smoke (20 cells) four times, each in a fresh run directory: locally with
`--jobs 1` and `--jobs 2` (the executor's loop, `runner.runtime.executor.execute`), then on a
local Dask cluster (a `dask scheduler` process, one `bench worker --nworkers K` process) with 1
and 2 worker processes (`runner.scale.cluster.execute_on_cluster`). Prints attempts/min of each
(attempt loop only: image, services and worker start-up excluded) and their ratios to local
`--jobs 1`; and, for the cluster runs, per attempt: submit -> journal written on the coordinator
vs the attempt's own wall time on its worker (their difference: scheduling, transfer, checks,
writing), and the coordinator's check+write time alone.

`sim`: a spec of N cells (swe-lite-smoke with N/20 seeds, in a temp folder) through a scheduler
and 2 plain `dask worker` processes running `worker_simulate.simulated_attempt_task` (a no-op
attempt that still journals started/graded/ended with a report blob; the request, the worker's
protocol check, the plan, the bundle, the coordinator's checks and writes are real). Prints the
coordinator's CPU seconds and RSS growth per 10^4 cells, attempts/s, and the scheduler's RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"
BIN = Path(sys.executable).parent


def rss_mib(pid: int | None = None) -> float:
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@contextmanager
def local_cluster(workers: int, *, bench_worker: bool, spec: Path, logs: Path) -> Iterator[str]:
    """A scheduler (allowed_failures 0) and `workers` worker processes; yields its address."""
    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    env["AFB_SIM_SCRATCH"] = str(logs)  # simulated workers' scratch: removed with the temp dir
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    with open(logs / "scheduler.log", "wb") as slog, open(logs / "workers.log", "wb") as wlog:
        procs.append(
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
                stdout=slog,
                stderr=subprocess.STDOUT,
            )
        )
        try:
            if bench_worker:
                cmd = [
                    str(BIN / "bench"),
                    "worker",
                    "--scheduler",
                    address,
                    "--spec",
                    str(spec),
                    "--resources",
                    "NETNS=1",
                    "--nworkers",
                    str(workers),
                ]
                procs.append(subprocess.Popen(cmd, stdout=wlog, stderr=subprocess.STDOUT))
            else:
                for _ in range(workers):
                    procs.append(
                        subprocess.Popen(
                            [
                                str(BIN / "dask"),
                                "worker",
                                address,
                                "--nthreads",
                                "1",
                                "--resources",
                                "NETNS=1",
                                "--no-dashboard",
                                "--memory-limit",
                                "0",
                            ],
                            stdout=wlog,
                            stderr=subprocess.STDOUT,
                            env=env,
                        )
                    )
            with Client(address, timeout="60s") as c:
                c.wait_for_workers(workers, timeout=300)
            yield address
        finally:
            for p in reversed(procs):
                p.send_signal(signal.SIGTERM)
            for p in reversed(procs):
                try:
                    p.wait(120)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _attempts(run_dir: Path) -> int:
    return len(list((run_dir / "journals").glob("*-a*.jsonl")))


def real(out: Path) -> None:
    from runner.benchmarks.registry import workload_for
    from runner.evaluator.core.inputs import project_root
    from runner.imagebuild import builder as images
    from runner.runtime.attempt import run as attempt
    from runner.runtime.attempt.services import RunServices
    from runner.runtime.executor import MatrixRun, execute
    from runner.runtime.host import naming
    from runner.runtime.prepared import SpecSource, prepare
    from runner.scale.cluster import connect, execute_on_cluster

    source = SpecSource.read(SMOKE)
    workload = workload_for(source.spec, SMOKE)
    tag = images.ensure_image(project_root() / "images" / workload.image).tag
    rows = []
    for jobs in (1, 2):
        mrun = MatrixRun.create(
            prepare(source), out / f"local{jobs}", naming.new_run_id(), True, workload
        )
        mrun.record_start(None, None)
        with RunServices(mrun.rp.run_id, mrun.run_dir) as services:
            summary = execute(mrun, tag, lambda p, s=services: attempt.run_attempt(p, s), jobs)
        rows.append((f"local --jobs {jobs}", _attempts(mrun.run_dir), summary.wall_s, None))
    for workers in (1, 2):
        with local_cluster(
            workers, bench_worker=True, spec=SMOKE, logs=out / f"logs{workers}"
        ) as a:
            client = connect(a)
            mrun = MatrixRun.create(
                prepare(source), out / f"cluster{workers}", naming.new_run_id(), True, workload
            )
            mrun.record_start(None, None)
            # as many tasks out as workers: a submitted attempt starts at once, as with --jobs
            cs = execute_on_cluster(mrun, tag, client, {"NETNS": 1}, window=workers)
            client.close()
        rows.append((f"cluster {workers} worker(s)", _attempts(mrun.run_dir), cs.wall_s, cs))
    base = rows[0][1] / rows[0][2] * 60
    print(f"\nswe-lite-smoke, 20 cells, this machine ({os.cpu_count()} CPUs)")
    print(f"{'mode':<22}{'attempts':>9}{'wall s':>9}{'attempts/min':>14}{'vs local -j1':>14}")
    for name, n, wall, _ in rows:
        rate = n / wall * 60
        print(f"{name:<22}{n:>9}{wall:>9.1f}{rate:>14.1f}{rate / base:>13.2f}x")
    for name, _, _, cs in rows:
        if cs is None or not cs.timings:
            continue
        t = cs.timings
        total = [x.submit_to_written_s for x in t]
        own = [x.attempt_wall_s for x in t]
        over = [a - b for a, b in zip(total, own, strict=True)]
        chk = [x.admit_s * 1000 for x in t]
        back = [x.back_s * 1000 for x in t]
        print(
            f"{name}: per attempt (median / max over {len(t)}): submit->journal written "
            f"{statistics.median(total):.2f}/{max(total):.2f} s, attempt on worker "
            f"{statistics.median(own):.2f}/{max(own):.2f} s, difference "
            f"{statistics.median(over):.3f}/{max(over):.3f} s "
            f"({100 * statistics.median(over) / statistics.median(own):.1f}% of the attempt), "
            f"worker done->journal written {statistics.median(back):.0f}/{max(back):.0f} ms, of "
            f"which coordinator check+write {statistics.median(chk):.1f}/{max(chk):.1f} ms; "
            f"cells per worker {dict(cs.cells_per_worker)}"
        )


def sim_spec(folder: Path, cells: int) -> Path:
    """swe-lite-smoke with cells/20 seeds (20 cells per seed), tasks copied beside it."""
    if cells % 20:
        raise SystemExit("--cells must be a multiple of 20")
    shutil.copytree(ROOT / "specs" / "swe-lite", folder / "swe-lite")
    text = (
        SMOKE.read_text()
        .replace(
            "seeds = [1]", "seeds = [" + ", ".join(str(i) for i in range(1, cells // 20 + 1)) + "]"
        )
        .replace('id = "swe-lite-smoke"', 'id = "swe-lite-clustersim"')
    )
    path = folder / "sim.toml"
    path.write_text(text)
    return path


def sim(out: Path, cells: int, window: int | None, every: int = 10_000) -> None:
    from distributed import Client

    from runner.benchmarks.registry import workload_for
    from runner.evaluator.core.inputs import project_root
    from runner.imagebuild import builder as images
    from runner.runtime.executor import MatrixRun
    from runner.runtime.host import naming
    from runner.runtime.prepared import SpecSource, prepare
    from runner.scale.cluster import connect, execute_on_cluster
    from runner.scale.worker_simulate import simulated_attempt_task

    spec = sim_spec(out, cells)
    source = SpecSource.read(spec)
    workload = workload_for(source.spec, spec)
    tag = images.image_tag(project_root() / "images" / workload.image)
    with local_cluster(2, bench_worker=False, spec=spec, logs=out / "logs") as address:
        client = connect(address)
        t_create = time.perf_counter()
        mrun = MatrixRun.create(prepare(source), out / "runs", naming.new_run_id(), True, workload)
        mrun.record_start(None, None)
        create_s = time.perf_counter() - t_create
        print(
            f"{cells} cells: run directory created in {create_s:.1f} s, RSS {rss_mib():.0f} MiB",
            flush=True,
        )
        cpu0, rss0, t0 = cpu_s(), rss_mib(), time.perf_counter()
        done = [0]

        def tick(cell: object) -> None:  # figures so far, every `every` cells
            done[0] += 1
            if done[0] % every == 0:
                c, w = cpu_s() - cpu0, time.perf_counter() - t0
                print(
                    f"  ... {done[0]} cells: wall {w:.0f} s, coordinator CPU {c:.1f} s "
                    f"({1000 * c / done[0]:.2f} ms/cell), RSS {rss_mib():.0f} MiB",
                    flush=True,
                )

        cs = execute_on_cluster(
            mrun,
            tag,
            client,
            {"NETNS": 1},
            task=simulated_attempt_task,
            window=window,
            on_cell_done=tick,
        )
        wall, cpu, rss1 = time.perf_counter() - t0, cpu_s() - cpu0, rss_mib()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with Client(address, timeout="60s") as c2:
            sched_pid = c2.run_on_scheduler(os.getpid)
        sched_rss = rss_mib(sched_pid)
        client.close()
    n = cs.attempts_run
    per = 10_000 / max(1, n)
    print(
        f"\nsimulated matrix: {cells} cells, {n} no-op attempts, 2 dask workers, window "
        f"{window or 'default (2 per worker thread, >= 8)'}"
    )
    print(f"  run directory created (protocol.json, identities) in {create_s:.1f} s")
    print(
        f"  wall {wall:.1f} s, {n / wall:.1f} attempts/s; lost {len(cs.lost)}, "
        f"resubmitted {cs.resubmitted}"
    )
    print(
        f"  coordinator CPU {cpu:.1f} s = {cpu * per:.1f} s per 10^4 cells "
        f"({1000 * cpu / max(1, n):.2f} ms per attempt)"
    )
    print(
        f"  coordinator RSS {rss0:.0f} -> {rss1:.0f} MiB (+{(rss1 - rss0) * per:.1f} MiB per "
        f"10^4 cells), peak {peak:.0f} MiB; scheduler RSS {sched_rss:.0f} MiB"
    )
    admit = sorted(x.admit_s * 1000 for x in cs.timings)
    if admit:
        print(
            f"  coordinator check+write per attempt: median {statistics.median(admit):.2f} ms, "
            f"p99 {admit[int(0.99 * (len(admit) - 1))]:.2f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=["real", "sim"])
    ap.add_argument("--cells", type=int, action="append", help="sim: matrix size (repeatable)")
    ap.add_argument("--window", type=int, default=None, help="sim: tasks in flight")
    ap.add_argument("--tmp", type=Path, default=None, help="where run directories go")
    ap.add_argument("--every", type=int, default=10_000, help="sim: print figures every N cells")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="afb-bench-cluster-", dir=args.tmp) as d:
        if args.part == "real":
            real(Path(d))
        else:
            for i, cells in enumerate(args.cells or [10_000]):
                folder = Path(d) / f"sim{i}"
                folder.mkdir()
                sim(folder, cells, args.window, args.every)


if __name__ == "__main__":
    main()
