"""Runs sharing one host never collide, and `bench sweep` removes nothing of a live run.

- run ids: drawn at random and reserved on the host (the lock file, O_EXCL), so two processes
  drawing at once never get the same id, even when the random source repeats itself;
- addresses and names: two processes (two runs) allocating attempt networks at the same time get
  disjoint /30s in 198.18.0.0/15 and disjoint netns / veth names;
- two real `bench run`s (the smoke matrix's shards 0/2 and 1/2) at the same time, with
  `bench sweep --run <id>` aimed at each of them again and again while they are mid-attempt: the
  sweeps skip the live runs and remove nothing of them, no attempt of either run becomes a
  harness error, every cell ends, both journals verify after a merge, and afterwards nothing of
  either run is left on the host;
- a sweep holds a dead run's lock while removing it: `hold_run` (a run resumed meanwhile) waits
  for the sweep instead of racing it.
"""

from __future__ import annotations

import ipaddress
import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.core.inputs import project_root
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.records import AttemptEnded, HarnessError
from runner.runtime.host import naming, nft, paths
from runner.runtime.host.netns import BENCH_NET, AttemptNetwork, host_links, list_netns

pytestmark = pytest.mark.runtime
SPEC = project_root() / "specs" / "swe-lite-smoke.toml"


# ------------------------------------------------------------------------------------ run ids


def _draw(n: int, q: Any) -> None:
    q.put([naming.new_run_id() for _ in range(n)])


def test_run_ids_from_two_processes_never_repeat() -> None:
    q: Any = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_draw, args=(300, q)) for _ in range(2)]
    for p in procs:
        p.start()
    ids = q.get(timeout=60) + q.get(timeout=60)
    for p in procs:
        p.join()
    try:
        assert len(set(ids)) == len(ids) == 600
    finally:
        for rid in ids:
            (paths.LOCK_DIR / f"{rid}.lock").unlink(missing_ok=True)


def test_a_repeated_draw_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter(["abc123", "abc123", "abc124"])
    monkeypatch.setattr(naming.secrets, "token_hex", lambda n: next(draws))
    for rid in ("abc123", "abc124"):
        (paths.LOCK_DIR / f"{rid}.lock").unlink(missing_ok=True)
    try:
        assert naming.new_run_id() == "abc123"
        assert naming.new_run_id() == "abc124"  # abc123 is reserved: drawn again
    finally:
        for rid in ("abc123", "abc124"):
            (paths.LOCK_DIR / f"{rid}.lock").unlink(missing_ok=True)


# ------------------------------------------------------------------------- addresses and names


def _allocate(run_id: str, n: int, q: Any, go: Any) -> None:
    go.wait(30)
    nets = [AttemptNetwork(run_id).create() for _ in range(n)]
    q.put([(str(x.subnet), x.netns, x.host_if, x.ns_if) for x in nets])
    time.sleep(1.0)  # all held at once: the other process allocates while these exist
    for x in nets:
        x.close()


def test_two_runs_allocating_at_once_get_disjoint_subnets_and_names() -> None:
    go = multiprocessing.Event()
    q: Any = multiprocessing.Queue()
    run_ids = [naming.new_run_id() for _ in range(2)]
    procs = [multiprocessing.Process(target=_allocate, args=(rid, 12, q, go)) for rid in run_ids]
    for p in procs:
        p.start()
    go.set()
    got = q.get(timeout=120) + q.get(timeout=120)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    subnets = [ipaddress.IPv4Network(s) for s, *_ in got]
    assert len(got) == 24
    assert all(s.subnet_of(BENCH_NET) for s in subnets)
    for i, a in enumerate(subnets):  # pairwise disjoint, not merely unequal
        assert not any(a.overlaps(b) for b in subnets[i + 1 :]), a
    names = [name for _, *rest in got for name in rest]
    assert len(set(names)) == len(names)
    assert not [n for n in list_netns() + host_links() if any(r in n for r in run_ids)]


# ------------------------------------------------------------------- a sweep waits for nothing


def test_a_sweep_holds_a_dead_runs_lock_and_hold_run_waits_for_it() -> None:
    rid = naming.new_run_id()
    fd = naming.lock_run(rid)
    assert fd is not None
    os.pwrite(fd, naming.SWEEPER, 0)  # what sweep does while removing a dead run
    waited: list[float] = []

    def resume() -> None:
        t0 = time.monotonic()
        with naming.hold_run(rid):
            waited.append(time.monotonic() - t0)

    t = threading.Thread(target=resume)
    t.start()
    time.sleep(0.5)
    assert t.is_alive() and not waited  # the resumed run waits for the sweep
    (paths.LOCK_DIR / f"{rid}.lock").unlink()  # sweep.release(): the file goes, then the lock
    os.close(fd)
    t.join(30)
    assert waited and not naming.run_is_live(rid)
    # a run held by a live run (not a sweep) is refused at once
    with naming.hold_run(rid), pytest.raises(BlockingIOError), naming.hold_run(rid):
        pass


# ------------------------------------------------------------------ two real runs and sweeps


def _bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner.cli.main", *args]


def _leftovers(run_id: str) -> list[str]:
    found = [n for n in list_netns() if run_id in n]
    found += [n for n in host_links() if run_id in n]
    found += [f"nft {n}" for _, n in nft.list_tables() if run_id in n]
    ps = subprocess.run(
        ["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True, check=True
    )
    found += [
        c["Names"][0] for c in json.loads(ps.stdout or "[]") if run_id in (c["Names"] or [""])[0]
    ]
    for d in (paths.SUBJECT_ROOT / run_id, paths.SANDBOX_ROOT / run_id):
        if d.exists():
            found.append(str(d))
    return found


def test_two_runs_at_once_and_sweeps_during_them(tmp_path: Path) -> None:
    runs = [
        subprocess.Popen(
            _bench(
                "run", str(SPEC), "--draft", "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    ids: list[str] = []
    deadline = time.monotonic() + 300
    while len(ids) < 2 and time.monotonic() < deadline:  # each run's directory names its id
        ids = sorted(
            m[1]
            for i in range(2)
            for d in (tmp_path / f"s{i}").glob("*")
            if (m := re.search(r"-([0-9a-f]{6})$", d.name))
        )
        time.sleep(0.2)
    assert len(ids) == 2 and ids[0] != ids[1]
    sweeps, mid_attempt = 0, 0
    while any(r.poll() is None for r in runs):
        for rid in ids:
            seen = [n for n in list_netns() if rid in n]  # an attempt in progress
            out = subprocess.run(
                _bench("sweep", "--run", rid), capture_output=True, text=True, timeout=120
            )
            sweeps += 1
            mid_attempt += bool(seen)
            text = out.stdout + out.stderr
            assert "removed" not in text, text  # nothing of a live run, nothing else
            if seen and naming.run_is_live(rid):
                assert f"skipped live run {rid}" in text, text
        time.sleep(0.5)
    for r in runs:
        text, _ = r.communicate()
        assert r.returncode == 0, text
    assert mid_attempt >= 2, f"only {mid_attempt} of {sweeps} sweeps hit a live attempt"
    for i in range(2):
        (run_dir,) = list((tmp_path / f"s{i}").iterdir())
        ended = [
            e.record
            for _, e in EvidenceStore(run_dir).entries()
            if isinstance(e.record, (AttemptEnded, HarnessError))
        ]
        assert ended and all(
            isinstance(r, AttemptEnded) and r.outcome != "harness_error" for r in ended
        ), [r for r in ended if not isinstance(r, AttemptEnded) or r.outcome == "harness_error"]
    merged = tmp_path / "merged"
    dirs = [str(next((tmp_path / f"s{i}").iterdir())) for i in range(2)]
    m = subprocess.run(_bench("merge", *dirs, "--out", str(merged)), capture_output=True, text=True)
    assert m.returncode == 0, m.stdout + m.stderr
    assert subprocess.run(_bench("evaluate", str(merged)), capture_output=True).returncode == 3
    v = subprocess.run(_bench("verify", str(merged)), capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    for rid in ids:
        assert _leftovers(rid) == []
        assert not (paths.LOCK_DIR / f"{rid}.lock").exists()


def test_sweep_removes_abandoned_reservations_only() -> None:
    from runner.runtime.sweep import sweep

    draw = "from runner.runtime.host import naming; print(naming.new_run_id())"
    child = subprocess.run(
        [sys.executable, "-c", draw], capture_output=True, text=True, check=True, cwd=project_root()
    )
    abandoned = child.stdout.strip()
    mine = naming.new_run_id()  # this process is alive: its reservation stands
    try:
        assert (paths.LOCK_DIR / f"{abandoned}.lock").exists()
        report = sweep(abandoned)
        assert report.locks == [str(paths.LOCK_DIR / f"{abandoned}.lock")]
        assert not (paths.LOCK_DIR / f"{abandoned}.lock").exists()
        assert sweep(mine).locks == [] and (paths.LOCK_DIR / f"{mine}.lock").exists()
    finally:
        (paths.LOCK_DIR / f"{mine}.lock").unlink(missing_ok=True)
