"""Report benchmark (run on demand; not a test): `bench report` against `bench evaluate`.

    cd /work/main && .venv/bin/python tests/perf/bench_report.py [--cells 100000] [--repeat 3]
        [--keep DIR]

Two runs, each measured as three CLI processes on the same run directory (what a user runs, so
interpreter start-up and imports count in every figure, in the same way):

- the published swe-lite bundle (copied aside: 160 cells, real journals, 4 publishable
  subjects), best of --repeat;
- a synthetic run of --cells cells (spec_ab's faults and subjects with cells / 10 tasks:
  subject a publishable with failures and duplicate effects, subject b incomplete: a no-op
  injector on 2 % of its cells), its journals written as the journal writer writes them
  (canonical envelopes, real hash chain; without one fsync per line, which only the writer
  pays), best of 1.

Per run: wall time, CPU time (user + system: steadier than wall time on a shared machine) and
peak RSS (the child's own, from wait4) of `bench --help` (start-up alone, to subtract),
`bench evaluate`, `bench report --out` (HTML) and `bench report --junit --out`, each also as a
ratio to evaluate's; and the sizes of report.html and junit.xml against results/ (what evaluate
writes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.evaluator.core.canonical import fast_canonical_bytes, sha256_digest  # noqa: E402
from runner.evaluator.protocol.runfile import write_protocol  # noqa: E402
from tests.evidence.synth import SPEC_AB, Run  # noqa: E402

# `bench` of the checkout holding this script (PYTHONPATH below), whatever the venv points at.
BENCH = [sys.executable, "-m", "runner.cli.main"]
BUNDLE = ROOT / "vectors/published/swe-lite-20261201T053408Z-56f397"
T0 = 1_700_000_000_000_000_000


def make_spec(path: Path, tasks: int) -> None:
    text = SPEC_AB.read_text()
    start, end = text.index("tasks = ["), text.index("]\n\n[[subjects]]")
    rows = ",\n".join(
        f'  {{ id = "t{i:06d}", bucket = "{"easy" if i % 2 else "hard"}" }}' for i in range(tasks)
    )
    path.write_text(text[:start] + "tasks = [\n" + rows + ",\n" + text[end:])


def synth_run(run_dir: Path, cells: int) -> None:
    spec = run_dir.parent / "perf-report.toml"
    make_spec(spec, max(1, cells // 10))
    r = Run(run_dir, spec_path=spec, in_memory=True)
    write_protocol(run_dir, r.protocol)
    r.fill("a", lambda i, s: ("completed", "failed", "duplicate", "completed")[i % 4])
    r.fill("b", lambda i, s: "noop" if i % 50 == 7 else "completed")
    (run_dir / "journals").mkdir(parents=True, exist_ok=True)
    (run_dir / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    assert r.memory is not None
    lines: dict[str, list[bytes]] = {}
    prev: dict[str, str | None] = {}
    for n, (name, seq, record) in enumerate(r.memory):
        env = {"seq": seq, "prev": prev.get(name), "at_ns": str(T0 + n * 1000),
               "record": record.model_dump(mode="json")}  # fmt: skip
        line = fast_canonical_bytes(env)
        prev[name] = sha256_digest(line)
        lines.setdefault(name, []).append(line + b"\n")
    for name, data in lines.items():
        (run_dir / "journals" / f"{name}.jsonl").write_bytes(b"".join(data))


def timed(args: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds (user + system), peak RSS MiB) of that child alone."""
    t = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode() if p.stderr else ""
    if p.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(args)} failed ({p.returncode}): {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(label: str, run_dir: Path, repeat: int) -> None:
    out = run_dir.parent / "out"
    out.mkdir(exist_ok=True)
    html, xml = out / "report.html", out / "junit.xml"
    rows = {
        "start-up only (bench --help)": [*BENCH, "--help"],
        "evaluate": [*BENCH, "evaluate", str(run_dir)],
        "report (HTML)": [*BENCH, "report", str(run_dir), "--out", str(html)],
        "report --junit": [*BENCH, "report", str(run_dir), "--junit", "--out", str(xml)],
    }
    best: dict[str, tuple[float, float, float]] = {}
    for name, args in rows.items():
        runs = [timed(args) for _ in range(repeat)]
        best[name] = (min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs))
    results = sum(p.stat().st_size for p in (run_dir / "results").rglob("*") if p.is_file())
    ev, ev_cpu = best["evaluate"][:2]
    print(f"\n## {label}\n")
    print("| step | wall (s) | ratio | CPU (s) | ratio | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|")
    for name, (wall, cpu, rss) in best.items():
        ratios = f"{wall / ev:.2f} | {cpu:.2f} | {cpu / ev_cpu:.2f}"
        print(f"| {name} | {wall:.2f} | {ratios} | {rss:.0f} |")
    h, x = html.stat().st_size, xml.stat().st_size
    print(f"\nresults/ (evaluate's output): {results / 1e6:.3f} MB; "
          f"report.html: {h / 1e6:.3f} MB ({h / results:.2f}x); "
          f"junit.xml: {x / 1e6:.3f} MB ({x / results:.2f}x)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="build the runs here and keep them")
    ap.add_argument("--synth-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.synth_only:
        synth_run(args.synth_only, args.cells)
        return
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="afb-bench-report-"))
    try:
        b = tmp / "bundle" / BUNDLE.name
        shutil.rmtree(b.parent, ignore_errors=True)
        shutil.copytree(BUNDLE, b)
        measure(f"swe-lite bundle ({BUNDLE.name}, 160 cells)", b, args.repeat)
        s = tmp / "synthetic" / "run"
        shutil.rmtree(s.parent, ignore_errors=True)
        s.parent.mkdir(parents=True)
        t = time.perf_counter()
        # In a child: a child's peak RSS counts its parent's at fork, so the measuring parent
        # must never hold the synthetic records.
        subprocess.run([sys.executable, __file__, "--synth-only", str(s), "--cells",
                        str(args.cells)], check=True)  # fmt: skip
        print(f"\n(synthetic run of {args.cells} cells written in {time.perf_counter() - t:.1f} s)")
        measure(f"synthetic run ({args.cells} cells, 1 of 2 subjects incomplete)", s, 1)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
