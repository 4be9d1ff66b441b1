"""Runtime primitive timings (run on demand as root; not a test).

    cd /work/main && uv run python tests/perf/bench_runtime_primitives.py [-n 20]

Prints the median (and p90) of N runs for our primitives and for bare equivalents measured
in the same process, plus ratios, so overhead is judged against the machine, not in absolute.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runner.runtime.host import naming
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.nft import PartitionTable
from runner.runtime.host.podman_service import PodmanService
from runner.runtime.sandbox import testimage
from runner.runtime.sandbox.base import SandboxSpec
from runner.runtime.sandbox.podman import PodmanSandbox
from runner.runtime.sweep import sweep


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(name: str, xs: list[float]) -> float:
    med = statistics.median(xs)
    p90 = sorted(xs)[max(0, int(len(xs) * 0.9) - 1)]
    print(f"{name:<34} median {med * 1000:8.1f} ms   p90 {p90 * 1000:8.1f} ms   n={len(xs)}")
    return med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    n = ap.parse_args().n
    image, built = testimage.ensure_test_image()
    rid = naming.new_run_id()
    run_dir = Path(tempfile.mkdtemp(prefix="afb-p-"))
    res: dict[str, float] = {}
    try:
        with naming.hold_run(rid), PodmanService(rid, run_dir) as svc:
            # netns + veth (addressed, up) vs bare `ip netns add` + `ip netns del`
            setup, teardown = [], []
            for _ in range(n):
                net = AttemptNetwork(rid)
                setup.append(timed(net.create))
                teardown.append(timed(net.close))
            res["netns"] = summary("netns+veth setup", setup)
            summary("netns+veth teardown", teardown)
            bare_ns = []
            for i in range(n):
                name = f"afbbench-{rid}-{i}"
                bare_ns.append(
                    timed(lambda nm=name: subprocess.run(["ip", "netns", "add", nm], check=True))
                )
                subprocess.run(["ip", "netns", "delete", name], check=True)
            res["bare_ns"] = summary("bare `ip netns add`", bare_ns)

            # nft rule apply (incl. read-back verification)
            with (
                AttemptNetwork(rid) as net,
                PartitionTable(rid, net.index or 0, netns=net.netns) as t,
            ):
                srv = socket.socket()
                srv.bind((str(net.host_addr), 0))
                port = srv.getsockname()[1]
                apply_t, release_t = [], []
                for _ in range(n):
                    t0 = time.perf_counter()
                    rule = t.add_drop(str(net.host_addr), port)
                    apply_t.append(time.perf_counter() - t0)
                    release_t.append(timed(lambda r=rule.rule_id: t.remove_rule(r)))
                srv.close()
            res["apply"] = summary("nft drop rule apply+verify", apply_t)
            summary("nft drop rule release", release_t)

            # sandbox create+start (incl. boot token) and restart, vs bare podman run --rm
            cs, rs = [], []
            for i in range(n):
                sb = PodmanSandbox(
                    svc.url, SandboxSpec(run_id=rid, name_suffix=f"bench{i}", image=image)
                )
                try:
                    cs.append(timed(lambda sb=sb: (sb.create(), sb.start())))
                    rs.append(timed(sb.restart))
                finally:
                    sb.remove()
            res["sandbox"] = summary("sandbox create+start", cs)
            res["restart"] = summary("sandbox restart", rs)
            bare_run = [
                timed(
                    lambda: subprocess.run(
                        [
                            "podman",
                            "run",
                            "--rm",
                            "--network",
                            "none",
                            "--cap-drop",
                            "all",
                            image,
                            "true",
                        ],
                        check=True,
                        capture_output=True,
                    )
                )
                for _ in range(n)
            ]
            res["bare_run"] = summary("bare `podman run --rm ... true`", bare_run)

        print()
        print(f"ratio netns+veth setup / bare ip netns add : {res['netns'] / res['bare_ns']:.2f}")
        print(
            f"ratio sandbox create+start / bare run      : {res['sandbox'] / res['bare_run']:.2f}"
        )
        print(
            f"ratio sandbox restart / bare run           : {res['restart'] / res['bare_run']:.2f}"
        )
    finally:
        left = sweep(rid, include_live=True)
        if left.removed_anything:
            print("swept leftovers:", left.model_dump_json())
        shutil.rmtree(run_dir, ignore_errors=True)
        if built:
            testimage.remove_image(image)


if __name__ == "__main__":
    main()
