"""Foundation benchmark (run on demand; not a test).

    cd /work/main && uv run python tests/perf/bench_foundation.py [--tasks 250 --seeds 25]

Generates a spec of TASKS tasks x (4 faults + baseline) x SEEDS seeds x 4 subjects (default
250 x 5 x 25 x 4 = 125,000 cells), then measures, in one process:

- load: parse + validate the TOML spec;
- resolve: expand the matrix into slots (a digest per slot);
- cells: materialize every cell with its cell id (a digest per cell);
- identities: every protocol identity (evaluator digest included);
- wall time (untraced) and peak memory: ru_maxrss of the process, and the tracemalloc peak of
  load+resolve+cells in a second, traced pass (--no-trace skips it);
- canonicalization throughput: RFC 8785 bytes of every slot record, MB/s, against plain
  hashlib.sha256 over the same bytes, and the digest (canonicalize + sha256) rate; best of 3.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from runner.evaluator.core.canonical import canonical_bytes, digest
from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec

FAULTS = [
    ("kill", "sigkill_mid_tool_call", "submit_patch", "effect_done", ""),
    ("lose", "lost_response", "submit_patch", "dispatched", ""),
    ("part", "network_partition", "submit_patch", "received", ""),
    ("restart", "sandbox_restart", "write_file", "response_sent", ', mode = "recreate"'),
]


def make_spec(tasks: int, seeds: int, subjects: int) -> str:
    rows = ",\n".join(
        f'  {{ id = "task-{i:05d}", bucket = "{("easy", "medium", "hard")[i % 3]}" }}'
        for i in range(tasks)
    )
    out = [
        'schema = "afb.spec/1"',
        '[protocol]\nid = "perf"\nversion = "1"',
        '[[tools]]\nname = "write_file"',
        '[[tools]]\nname = "submit_patch"\nirreversible = true',
        f'[[task_sets]]\nid = "perf"\nbuckets = ["easy", "medium", "hard"]\ntasks = [\n{rows}\n]',
    ]
    for n in range(subjects):
        out.append(
            f'[[subjects]]\nid = "s{n}"\nagent = "reference:blind_retry"\n'
            f"config = {{ max_retries = {n} }}"
        )
    for fid, kind, tool, phase, extra in FAULTS:
        trigger = f'{{ tool = "{tool}", ordinal = 1, phase = "{phase}" }}'
        params = f"parameters = {{ {extra.lstrip(', ')} }}" if extra else ""
        out.append(f'[[faults]]\nid = "{fid}"\nkind = "{kind}"\ntrigger = {trigger}\n{params}')
    out.append(f"[matrix]\nseeds = [{', '.join(str(s) for s in range(1, seeds + 1))}]")
    out.append("[attempts]\ncap = 3")
    out.append('[scoring]\nscorer_version = "1"\nmeasures = ["completion", "recovery_overhead"]')
    out.append('[grader]\nid = "g"\nversion = "1"')
    return "\n\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=250)
    ap.add_argument("--seeds", type=int, default=25)
    ap.add_argument("--subjects", type=int, default=4)
    ap.add_argument(
        "--no-trace", dest="trace", action="store_false", help="skip the tracemalloc pass"
    )
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "perf.toml"
        path.write_text(make_spec(args.tasks, args.seeds, args.subjects), encoding="utf-8")

        # Timed pass: no tracing (tracemalloc slows allocation-heavy code several-fold).
        t0 = time.perf_counter()
        spec = load_spec(path)
        t1 = time.perf_counter()
        matrix = resolve(spec)
        t2 = time.perf_counter()
        cells = list(matrix.cells())
        t3 = time.perf_counter()
        ids = compute(spec, path, matrix)
        t4 = time.perf_counter()
        maxrss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peak = 0
        if args.trace:
            del matrix, cells
            tracemalloc.start()
            traced = resolve(load_spec(path))
            held = list(traced.cells())
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            del traced, held
            matrix = resolve(spec)
            cells = list(matrix.cells())

    n_cells = len(cells)
    assert n_cells == matrix.cell_count and len({c.cell_id for c in cells}) == n_cells
    print(
        f"matrix: {len(matrix.slots):,} slots x {len(matrix.subjects)} subjects "
        f"= {n_cells:,} cells; protocol_hash {ids.protocol_hash}"
    )
    print(f"  load spec        {t1 - t0:8.3f} s")
    print(f"  resolve (slots)  {t2 - t1:8.3f} s")
    print(f"  cells + ids      {t3 - t2:8.3f} s")
    print(f"  identities       {t4 - t3:8.3f} s  (incl. evaluator_digest over the tree)")
    print(f"  total wall       {t4 - t0:8.3f} s")
    print(
        f"  peak memory      {maxrss_mib:8.1f} MiB max RSS of the process"
        + (f"; {peak / 2**20:.1f} MiB traced peak of load+resolve+cells" if peak else "")
    )

    # Canonicalization throughput over the slot records (what a run file holds per slot).
    docs = [s.model_dump(mode="json") for s in matrix.slots]

    def best(fn: Callable[[], object], repeat: int = 3) -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    blobs = [canonical_bytes(d) for d in docs]
    total = sum(len(b) for b in blobs)
    t_canon = best(lambda: [canonical_bytes(d) for d in docs])
    t_sha = best(lambda: [hashlib.sha256(b).digest() for b in blobs])
    t_digest = best(lambda: [digest(d) for d in docs])
    mb = total / 1e6
    print(f"canonicalization: {len(docs):,} slot records, {mb:.2f} MB of canonical bytes")
    print(f"  RFC 8785 canonicalize  {mb / t_canon:9.2f} MB/s  ({len(docs) / t_canon:,.0f} docs/s)")
    print(f"  sha256 (same bytes)    {mb / t_sha:9.2f} MB/s")
    print(
        f"  digest = both          {mb / t_digest:9.2f} MB/s  ({len(docs) / t_digest:,.0f} docs/s)"
    )
    print(f"  canonicalize / sha256 slowdown: {t_sha and t_canon / t_sha:.0f}x")


if __name__ == "__main__":
    main()
