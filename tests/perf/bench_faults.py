"""Fault timings per attempt (run on demand as root; not a test).

    cd /work/main && uv run python tests/perf/bench_faults.py [-n 20] [--kinds a,b]

Per fault kind, N real attempts of the minimal subject; from the journal's own `at_ns`:
trigger -> witness persisted (`trigger_reached` to lifecycle `witnessed`), trigger -> actuator
receipt, and the attempt's setup (call -> `attempt_started`), subject wall time and teardown
(`grader_result` -> `attempt_ended`). Bare primitives (`ip netns add`, `podman run --rm`) are
measured in the same run, and harness figures are printed as ratios to them.

The partition's own bare primitive (`bare_cut`): in a ready namespace + table, one
`ip netns exec <ns> nft add rule ... counter drop` (the stock tool cutting the path) plus one
TCP connect to an open port by a process already running in the namespace (the prober: a
handshake and its pipe round trip). Its witness is printed as a ratio to that too.

`--close-watch S` (experiment only) sets the egress proxy's CLOSE_WATCH_S: after closing a
held call without a response the proxy waits that long for the subject's end before it
completes the directive, and under a partition the subject's FIN is dropped, so the partition
witness (taken once the directive completed) waits it out in full.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runtime_primitives import summary, timed

from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.evidence.records import LifecycleTransition
from runner.evaluator.protocol.faultkinds import NETWORK_PARTITION, injected_kinds
from runner.runtime.attempt.run import journal_name
from runner.runtime.attempt.services import RunServices
from runner.runtime.host import naming
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.nft import CHAIN, PartitionTable, run_nft
from runner.runtime.host.prober import Target
from runner.runtime.interposers import egress
from runner.runtime.sandbox import testimage
from runner.runtime.selftest import WITNESSED, minimal_subject, run_case
from runner.runtime.sweep import sweep


def _at(entries: list, typ: str, state: str | None = None) -> int:
    for e in entries:
        r = e.record
        if r.type == typ and (
            state is None or (isinstance(r, LifecycleTransition) and r.state == state)
        ):
            return int(e.at_ns)
    raise LookupError(f"no {typ} {state or ''}")


def bare_primitives(n: int, image: str, rid: str) -> dict[str, float]:
    res: dict[str, float] = {}
    bare_ns = []
    for i in range(n):
        name = f"afbbench-{rid}-{i}"
        bare_ns.append(
            timed(lambda nm=name: subprocess.run(["ip", "netns", "add", nm], check=True))
        )
        subprocess.run(["ip", "netns", "delete", name], check=True)
    res["bare_ns"] = summary("bare `ip netns add`", bare_ns)
    argv = ["podman", "run", "--rm", "--network", "none", "--cap-drop", "all", image, "true"]
    runs = [timed(lambda: subprocess.run(argv, check=True, capture_output=True)) for _ in range(n)]
    res["bare_run"] = summary("bare `podman run --rm ... true`", runs)
    return res


def bare_cut(n: int, rid: str) -> float:
    """`nft add rule` via the CLI + one in-namespace connect (see the module docstring)."""
    cuts = []
    with (
        AttemptNetwork(rid) as net,
        PartitionTable(rid, net.index or 0, netns=net.netns) as table,
        socket.create_server((str(net.host_addr), 0)) as lst,
    ):
        host, port = lst.getsockname()
        prober = net.prober()
        for i in range(n):
            rule = f"ip daddr {host} tcp dport {40000 + i} counter drop".split()
            argv = ["add", "rule", "inet", table.name, CHAIN, *rule]

            def cut(argv: list[str] = argv) -> None:
                run_nft(argv, netns=net.netns)
                res, _ = prober.probe([Target(host, port, 1.0)])
                assert res[0]["reachable"], res

            cuts.append(timed(cut))
    return summary("bare `nft add rule` + 1 connect", cuts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--kinds", default=",".join(k for k in injected_kinds()))
    ap.add_argument("--close-watch", type=float, default=None, help="experiment, see above")
    args = ap.parse_args()
    if args.close_watch is not None:
        print(f"EXPERIMENT: egress.CLOSE_WATCH_S {egress.CLOSE_WATCH_S} -> {args.close_watch}")
        egress.CLOSE_WATCH_S = args.close_watch
    kinds = args.kinds.split(",")
    image, built = testimage.ensure_test_image()
    rid = naming.new_run_id()
    run_dir = Path(tempfile.mkdtemp(prefix="afb-pf-"))
    subject = minimal_subject({"AFB_MIN_TIMEOUT": "2"})  # shorter partition hold per attempt
    med: dict[str, float] = {}
    try:
        med |= bare_primitives(args.n, image, rid)
        if NETWORK_PARTITION in kinds:
            with naming.hold_run(rid):
                med["bare_cut"] = bare_cut(args.n, rid)
        with RunServices(rid, run_dir) as services:
            for kind in kinds:
                t2w, t2r, setup, wall, down, bad = [], [], [], [], [], 0
                for i in range(args.n):
                    t0 = time.time_ns()
                    row, plan = run_case(
                        services, kind, "real", image, subject=subject, label=f"perf{i}"
                    )
                    if row.verdict != WITNESSED:
                        bad += 1
                        print(f"  {kind} #{i}: {row.verdict} {row.reasons}")
                        continue
                    path = services.run_dir / "journals" / f"{journal_name(plan)}.jsonl"
                    es = list(read_journal(path))
                    trig = _at(es, "trigger_reached")
                    t2w.append((_at(es, "lifecycle", "witnessed") - trig) / 1e9)
                    t2r.append((_at(es, "actuator_receipt") - trig) / 1e9)
                    setup.append((_at(es, "attempt_started") - t0) / 1e9)
                    ended = next(e.record for e in es if e.record.type == "attempt_ended")
                    wall.append(int(ended.wall_ns) / 1e9)
                    down.append((_at(es, "attempt_ended") - _at(es, "grader_result")) / 1e9)
                print(f"--- {kind} ({args.n - bad}/{args.n} witnessed)")
                if not t2w:
                    continue
                med[f"{kind}.t2w"] = summary("  trigger -> witness persisted", t2w)
                summary("  trigger -> actuator receipt", t2r)
                med[f"{kind}.setup"] = summary("  attempt setup (-> started)", setup)
                summary("  subject wall time", wall)
                med[f"{kind}.teardown"] = summary("  teardown (grade -> ended)", down)
        print()
        prim = med["bare_ns"] + med["bare_run"]
        for kind in kinds:
            if f"{kind}.t2w" not in med:
                continue
            print(
                f"{kind:<22} setup/(bare netns + bare run) {med[f'{kind}.setup'] / prim:5.2f}"
                f"   teardown/bare run {med[f'{kind}.teardown'] / med['bare_run']:5.2f}"
                f"   trigger->witness/bare run {med[f'{kind}.t2w'] / med['bare_run']:5.2f}"
            )
        if f"{NETWORK_PARTITION}.t2w" in med:
            ratio = med[f"{NETWORK_PARTITION}.t2w"] / med["bare_cut"]
            print(f"{NETWORK_PARTITION:<22} trigger->witness/bare cut {ratio:5.2f}")
    finally:
        left = sweep(rid, include_live=True)
        if left.removed_anything:
            print("swept leftovers:", left.model_dump_json())
        shutil.rmtree(run_dir, ignore_errors=True)
        if built:
            testimage.remove_image(image)


if __name__ == "__main__":
    main()
