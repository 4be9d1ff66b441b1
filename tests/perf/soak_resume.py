"""Crash soak: the runner SIGKILLed at random points, `--resume` each time (issue 17).

    .venv/bin/python tests/perf/soak_resume.py --kills 50 [--reference RUN_DIR] [--seed 1]

1. A reference: an uninterrupted `bench run SPEC --draft` (or `--reference` names one).
2. `bench run SPEC --draft` started, SIGKILLed (the runner process only, as an OOM kill or a
   power cut of the coordinator would: its subjects, Podman service and containers are orphaned)
   after a random delay, then `bench run SPEC --resume RUN_DIR` again and again until `--kills`
   kills have landed; then one last resume runs to the end.
3. At the end: `bench sweep --run ID`, then nothing of the run may be left on the host
   (`podman ps -a`, `ip netns`, host links, `nft list tables`, state folders, its lock file);
   `bench evaluate` + `bench verify` pass (every journal's chain, every blob); every cell has a
   terminal record; and every cell's terminal facts (status, reasons, completed, effects,
   tool calls) equal the reference's, except cells whose every attempt a kill cut off (the
   attempt policy's cap reached by kills alone: listed, not hidden).
4. `bench evaluate` SIGKILLed at random points: after each kill, results/ must be either the
   previous results or the new ones, never absent or half-written; then a clean evaluate and
   verify must pass.

Each `bench` invocation takes the shared runtime lock (`--lock`, flock) so other real tests on
this machine interleave between iterations rather than racing them. Prints figures; asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.evaluator.core.errors import EvidenceError  # noqa: E402
from runner.evaluator.core.inputs import evaluator_digest  # noqa: E402
from runner.evaluator.evidence.journal import EvidenceStore, read_journal  # noqa: E402
from runner.evaluator.evidence.records import AttemptEnded, AttemptStarted  # noqa: E402
from runner.evaluator.publish.results import DERIVED_VIEWS, derive  # noqa: E402
from runner.runtime.host import netns, nft, paths  # noqa: E402

FACTS = ("status", "reasons", "completed", "committed_effects", "intended_effects", "tool_calls")


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner.cli.main", *args]


@contextmanager
def runtime_lock(path: str | None) -> Iterator[None]:
    if not path:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def run_dir_in(out: Path) -> Path | None:
    dirs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    return dirs[0] if dirs else None


def terminal_facts(run_dir: Path) -> dict[str, dict[str, Any]]:
    _, results, _ = derive(run_dir, evaluator_digest())
    out = {}
    for r in results.values():
        for t in r.evaluation.terminal_records:
            body = t.model_dump(mode="json")
            out[t.cell_id] = {k: body[k] for k in FACTS} | {"attempts": body["attempts"]}
    return out


def cut_off_attempts(run_dir: Path) -> dict[str, set[int]]:
    """Per cell, the attempts that started and never ended (a kill landed in them)."""
    started: dict[tuple[str, int], bool] = {}
    for _, e in EvidenceStore(run_dir).entries():
        r = e.record
        if isinstance(r, AttemptStarted):
            started.setdefault((r.cell_id, r.attempt), False)
        elif isinstance(r, AttemptEnded):
            started[(r.cell_id, r.attempt)] = True
    cut: dict[str, set[int]] = {}
    for (cell, n), ended in started.items():
        if not ended:
            cut.setdefault(cell, set()).add(n)
    return cut


def leftovers(run_id: str) -> list[str]:
    found = [n for n in netns.list_netns() if run_id in n]
    found += [f"link {n}" for n in netns.host_links() if run_id in n]
    found += [f"nft {f} {n}" for f, n in nft.list_tables() if run_id in n]
    ps = subprocess.run(
        ["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True, check=True
    )
    found += [
        f"container {c['Names'][0]}"
        for c in json.loads(ps.stdout or "[]")
        if run_id in (c.get("Names") or [""])[0]
    ]
    for d in (paths.SUBJECT_ROOT / run_id, paths.SANDBOX_ROOT / run_id):
        if d.exists():
            found.append(str(d))
    if (paths.LOCK_DIR / f"{run_id}.lock").exists():
        found.append(f"lock {run_id}")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                env = (proc / "environ").read_bytes()
            except OSError:
                continue
            if f"AFB_RUN={run_id}".encode() in env.split(b"\0"):
                found.append(f"process {proc.name}")
    return found


def tree(d: Path) -> dict[str, str]:
    if not d.is_dir():
        return {}
    return {
        str(p.relative_to(d.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file() and str(p.relative_to(d.parent)) not in DERIVED_VIEWS
    }


def soak_run(args: argparse.Namespace, rng: random.Random, out: Path) -> tuple[Path, dict]:
    kills, iterations, errors, cut_log = 0, 0, [], []
    t_start = time.monotonic()
    while True:
        run_dir = run_dir_in(out)
        cmd = (
            bench("run", args.spec, "--resume", str(run_dir))
            if run_dir is not None
            else bench("run", args.spec, "--draft", "--out", str(out))
        )
        kill = kills < args.kills
        delay = rng.uniform(args.min_delay, args.max_delay)
        log = out.parent / f"{out.name}.log"
        with runtime_lock(args.lock), open(log, "ab") as fh:
            fh.write(f"--- iteration {iterations}: {' '.join(cmd[3:])}\n".encode())
            fh.flush()
            start = fh.tell()
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
            try:
                proc.wait(timeout=delay if kill else args.timeout)
                killed = False
            except subprocess.TimeoutExpired:
                if not kill:
                    raise
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                killed = True
        with open(log, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace")
        iterations += 1
        if killed:
            kills += 1
            cut_log.append(round(delay, 2))
            continue
        if proc.returncode in (0, 3):  # a draft run ends with evidence only (exit 3)
            break
        errors.append(f"exit {proc.returncode}: {text[-2000:]}")
        if len(errors) > 5:
            raise SystemExit("runner failed repeatedly without a kill:\n" + "\n".join(errors))
    run_dir = run_dir_in(out)
    assert run_dir is not None
    return run_dir, {
        "kills": kills,
        "iterations": iterations,
        "runner_errors": errors,
        "soak_wall_s": round(time.monotonic() - t_start, 1),
        "kill_delays_s": cut_log,
    }


def soak_evaluate(args: argparse.Namespace, rng: random.Random, run_dir: Path) -> dict:
    t0 = time.monotonic()
    subprocess.run(bench("evaluate", str(run_dir)), capture_output=True)
    full = time.monotonic() - t0
    final = tree(run_dir / "results")
    violations, kills = [], 0
    for _ in range(args.evaluate_kills):
        before = tree(run_dir / "results")
        proc = subprocess.Popen(
            bench("evaluate", str(run_dir)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            proc.wait(timeout=rng.uniform(0.05, full))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        now = tree(run_dir / "results")
        if not (run_dir / "results").is_dir():
            violations.append("results/ absent after a kill")
        elif now not in (before, final):
            violations.append(f"results/ neither old nor new ({len(now)} files)")
    stray = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("."))
    clean = subprocess.run(bench("evaluate", str(run_dir)), capture_output=True, text=True)
    verify = subprocess.run(bench("verify", str(run_dir)), capture_output=True, text=True)
    return {
        "evaluate_wall_s": round(full, 2),
        "evaluate_kills": kills,
        "atomicity_violations": violations,
        "stray_entries_after_kills": stray,
        "clean_evaluate_exit": clean.returncode,
        "verify_after_kills_exit": verify.returncode,
        "verify_after_kills": (verify.stdout + verify.stderr).strip()[-1500:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "specs" / "swe-lite-smoke.toml"))
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--evaluate-kills", type=int, default=10)
    ap.add_argument("--min-delay", type=float, default=0.3)
    ap.add_argument("--max-delay", type=float, default=15.0)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reference", type=Path, help="an uninterrupted run of the same spec")
    ap.add_argument("--work", type=Path, default=Path("/tmp/afb-soak"))
    ap.add_argument("--lock", default="/tmp/afb/runtime.lock" if Path("/tmp/afb").is_dir() else "")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    args.work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%H%M%S")
    if args.reference is None:
        ref_out = args.work / f"reference-{stamp}"
        with runtime_lock(args.lock):
            r = subprocess.run(bench("run", args.spec, "--draft", "--out", str(ref_out)),
                               capture_output=True, text=True)  # fmt: skip
        assert r.returncode in (0, 3), r.stdout + r.stderr
        args.reference = run_dir_in(ref_out)
    run_dir, figures = soak_run(args, rng, args.work / f"soak-{stamp}")
    run_id = run_dir.name.rsplit("-", 1)[-1]
    with runtime_lock(args.lock):
        sweep = subprocess.run(bench("sweep", "--run", run_id), capture_output=True, text=True)
        figures["final_sweep"] = sweep.stdout.strip().splitlines()
        figures["leftovers_after_sweep"] = leftovers(run_id)
    figures |= soak_evaluate(args, rng, run_dir)
    chains_ok, chains_bad = 0, []
    for path in sorted((run_dir / "journals").glob("*.jsonl")):
        try:
            for _ in read_journal(path):
                pass
            chains_ok += 1
        except EvidenceError as exc:
            chains_bad.append(str(exc))
    figures |= {"journals_chain_intact": chains_ok, "journals_chain_broken": chains_bad}
    figures["run_dir_entries"] = sorted(p.name for p in run_dir.iterdir())
    got, want = terminal_facts(run_dir), terminal_facts(args.reference)
    cut = cut_off_attempts(run_dir)
    exhausted = sorted(
        c for c, t in got.items() if t["status"] == "HARNESS_INVALID" and cut.get(c)
        and all(a["attempt"] in cut[c] for a in t["attempts"])
    )  # fmt: skip
    differing = sorted(
        c for c in want
        if c not in exhausted and {k: got.get(c, {}).get(k) for k in FACTS}
        != {k: want[c][k] for k in FACTS}
    )  # fmt: skip
    figures |= {
        "run_dir": str(run_dir),
        "cells": len(want),
        "cells_terminal": sum(1 for t in got.values() if t["status"] is not None),
        "attempts_cut_off_by_kills": sum(len(v) for v in cut.values()),
        "cells_exhausted_by_kills": len(exhausted),
        "cells_equal_to_reference": len(want) - len(differing) - len(exhausted),
        "cells_differing_from_reference (losses)": differing,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
