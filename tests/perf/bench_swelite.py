"""Per-cell time breakdown of a swe-lite run, from its journals' own timestamps (not a test).

    python tests/perf/bench_swelite.py RUN_DIR [JOBS]

Run it on a run directory made with `bench run specs/swe-lite.toml --jobs JOBS`. Per attempt:
  subject   AttemptEnded.wall_ns                                 (first launch -> last exit)
  grading   tool_calls record -> grader_result                   (ledger read + fresh sandbox;
            0 when the run's grade cache already held this (task, patch))
  attempt   first to last record of the attempt's journal
  outside   setup before the first record (netns, veth, sandbox, services) and teardown after
            the last are not journaled: (run wall x JOBS - sum of attempts) / attempts.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main(run_dir: Path, jobs: int) -> None:
    per_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    first, last = None, None
    for path in sorted((run_dir / "journals").glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        ts = [int(e["at_ns"]) for e in lines]
        first = min([*ts, first] if first else ts)
        last = max([*ts, last] if last else ts)
        if path.stem == "run":
            continue
        rec = {e["record"]["type"]: (int(e["at_ns"]), e["record"]) for e in lines}
        kind = rec["attempt_started"][1]["kind"] if "attempt_started" in rec else "?"
        stages = per_kind[kind]
        t0 = int(lines[0]["at_ns"])
        if "attempt_ended" in rec:
            stages["subject"].append(int(rec["attempt_ended"][1]["wall_ns"]) / 1e9)
        if "grader_result" in rec and "tool_calls" in rec:
            stages["grading"].append((rec["grader_result"][0] - rec["tool_calls"][0]) / 1e9)
        stages["attempt"].append((ts[-1] - t0) / 1e9)
    print(f"run {run_dir.name}: {(last - first) / 1e9:.1f} s from first to last record")
    print(f"{'kind':24} {'n':>4} {'subject':>8} {'grading':>8} {'attempt':>8}  (medians, s)")
    for kind, stages in sorted(per_kind.items()):
        med = {k: statistics.median(v) for k, v in stages.items() if v}
        print(
            f"{kind:24} {len(stages['attempt']):>4} "
            f"{med.get('subject', 0):8.2f} {med.get('grading', 0):8.2f} "
            f"{med.get('attempt', 0):8.2f}"
        )
    total = {
        k: sum(sum(s[k]) for s in per_kind.values()) for k in ("subject", "grading", "attempt")
    }
    print("sums (s): " + ", ".join(f"{k} {v:.1f}" for k, v in total.items()))
    n = sum(len(s["attempt"]) for s in per_kind.values())
    wall = (last - first) / 1e9
    print(
        f"per attempt: {wall * jobs / n:.2f} s of worker time, of which "
        f"{(wall * jobs - total['attempt']) / n:.2f} s outside the journal (setup + teardown)"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
