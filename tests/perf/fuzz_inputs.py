"""Fuzz the CLI's inputs at volume: spec text (`bench plan`), JSON files (`bench canonicalize`,
`bench digest`), run-directory layouts and journal bytes (`bench verify`), through the real CLI
entry in process, with the strategies of tests/hardening/fuzz.py. Prints, per target, the
examples run, the answers (command, exit code), the failures (exit-code contract broken: a
traceback, exit 1, a wrong code, a long message, an unnamed layout entry) with the first few
distinct ones, and the wall time.

    .venv/bin/python tests/perf/fuzz_inputs.py            # 10,000 / 10,000 / 1,000 / 2,000
    .venv/bin/python tests/perf/fuzz_inputs.py --specs 500 --json 500 --layouts 100 --journals 100

Never collected as a test (tests/perf/). Exit status 1 when any failure was found.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.foundation.helpers import REPO
from tests.hardening import fuzz
from tests.hardening.runs import evaluated


def _campaign(
    name: str, strategy: st.SearchStrategy[Any], check: Callable[[Any], str | None], n: int
) -> tuple[int, Counter[str]]:
    seen = [0]
    failures: Counter[str] = Counter()

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(value: Any) -> None:
        seen[0] += 1
        problem = check(value)
        if problem is not None:
            failures[problem.splitlines()[0][:300]] += 1

    fuzz.EXIT_CODES.clear()
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    codes = ", ".join(f"{c} exit {e}: {k}" for (c, e), k in sorted(fuzz.EXIT_CODES.items()))
    print(
        f"{name:8} examples {seen[0]:6}  failures {sum(failures.values()):4}  "
        f"distinct {len(failures):3}  wall {wall:7.1f} s\n    answers: {codes}"
    )
    for problem, count in failures.most_common(5):
        print(f"    {count:4} x {problem}")
    return seen[0], failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--specs", type=int, default=10_000)
    ap.add_argument("--json", type=int, default=10_000)
    ap.add_argument("--layouts", type=int, default=1_000)
    ap.add_argument("--journals", type=int, default=2_000)
    args = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory(prefix="afb-fuzz-") as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "specs" / "example-tasks", root / "example-tasks")
        spec = root / "example.toml"
        if args.specs:
            bad += sum(_campaign("specs", fuzz.spec_texts(), lambda t: fuzz.check_spec(spec, t),
                                 args.specs)[1].values())  # fmt: skip
        if args.json:
            path = root / "input.json"
            bad += sum(_campaign("json", fuzz.json_bytes(), lambda d: fuzz.check_json(path, d),
                                 args.json)[1].values())  # fmt: skip
        if args.layouts:
            run = evaluated(root / "run").run_dir
            outside = root / "outside.json"
            outside.write_text("{}")
            bad += sum(_campaign("layouts", fuzz.extras,
                                 lambda e: fuzz.check_layout(run, e, outside),
                                 args.layouts)[1].values())  # fmt: skip
        if args.journals:
            mixed = ["completed", "failed", "duplicate", "noop", "mismatch", "pre_trigger"]
            jrun = evaluated(root / "jrun", lambda i, s: mixed[i % len(mixed)]).run_dir
            bad += sum(_campaign("journals", fuzz.edits,
                                 lambda e: fuzz.check_journal_edit(jrun, e),
                                 args.journals)[1].values())  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
