"""Paired comparison of two subjects' scorecards (issue 25), from their cell-score rows.

Two subjects' cells pair when they share a slot: the same task, fault schedule, seed and
replicate. Per measure and stratum (and overall) a PairedTest carries the 2x2 table with the
exact McNemar test, the task-clustered exact sign-flip test (the headline: cells of one task are
not independent), the rate difference with its task-clustered bootstrap interval, and, across the
strata of one measure, Holm's adjustment. These are reported; they never admit or refuse a
comparison (the gate in compare.py does that, as before).

Measures compared: `completion` (every pair: the cell COMPLETED), `without_duplicates` (pairs
exposed in both subjects: the cell had no duplicate effect) and `extra_tool_calls` (pairs
recovered with their baseline in both subjects: the difference in extra tool calls; no 2x2
table, so no McNemar, and no rates).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

import pydantic_core

from runner.evaluator.core.types import Frozen, Status

from .models import Ratio
from .scoring import rate
from .stats import (
    Interval,
    McNemar,
    SignFlip,
    cluster_mean_interval,
    holm,
    mcnemar_exact,
    seed_from,
    sign_flip,
)

PairedMeasure = Literal["completion", "without_duplicates", "extra_tool_calls"]
MEASURES: tuple[PairedMeasure, ...] = ("completion", "without_duplicates", "extra_tool_calls")
OVERALL = "all"
_COMPLETED, _EXPOSED, _NO_DUP = 1, 2, 4


class PairedTest(Frozen):
    measure: PairedMeasure
    stratum: str  # "all": every comparable stratum together
    pairs: int
    tasks: int
    first_rate: Ratio | None  # None for extra_tool_calls (not a rate)
    second_rate: Ratio | None
    difference: float | None  # first - second over the pairs (a rate's, or the mean's)
    difference_interval: Interval | None  # task-clustered bootstrap, seed recorded
    mcnemar: McNemar | None  # None for extra_tool_calls
    sign_flip: SignFlip
    holm_p_value: float | None  # the sign-flip p adjusted across this measure's strata
    decision: Literal["first_higher", "second_higher", "no_difference_shown"]


class PairedComparison(Frozen):
    first: str  # subject ids, in the comparison's subject order
    second: str
    alpha: float
    tests: list[PairedTest]


# slot_id -> (task_id, stratum, flags, extra tool calls or None)
CellOutcomes = dict[str, tuple[str, str, int, int | None]]


def cell_outcomes(rows: bytes, strings: dict[str, str] | None = None) -> CellOutcomes | None:
    """The compact per-slot outcomes of a cell-scores file; None for rows written before
    they carried their slot and task (an older scorecard: regrade it first). `strings`, shared
    by the subjects of one run, holds each slot id, task id and stratum once: every subject has
    the same slots, and at a million cells the copies were a fifth of the evaluator's peak."""
    out: CellOutcomes = {}
    one = {} if strings is None else strings
    for line in rows.splitlines():
        if not line:
            continue
        r = pydantic_core.from_json(line)
        if r.get("slot_id") is None or r.get("task_id") is None:
            return None
        flags = (
            (_COMPLETED if r["status"] == Status.COMPLETED.value else 0)
            | (_EXPOSED if r["exposed"] else 0)
            | (_NO_DUP if r["duplicate_effects"] == 0 else 0)
        )
        slot, task, stratum = r["slot_id"], r["task_id"], r["stratum"]
        out[one.setdefault(slot, slot)] = (
            one.setdefault(task, task),
            one.setdefault(stratum, stratum),
            flags,
            r["extra_tool_calls"],
        )
    return out


def _test(
    measure: PairedMeasure,
    stratum: str,
    pairs: list[tuple[str, int, int]],
    seed: int,
) -> PairedTest:
    """`pairs`: (task, first value, second value): 0/1 outcomes, or extra tool calls."""
    n = len(pairs)
    by_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, a, b in pairs:
        by_task[task][0] += a - b
        by_task[task][1] += 1
    tasks = sorted(by_task)
    sums = [by_task[t][0] for t in tasks]
    counts = [by_task[t][1] for t in tasks]
    table = first = second = None
    if measure != "extra_tool_calls":
        both = sum(a and b for _, a, b in pairs)
        first_only = sum(a and not b for _, a, b in pairs)
        second_only = sum(b and not a for _, a, b in pairs)
        neither = n - both - first_only - second_only
        table = mcnemar_exact(both, first_only, second_only, neither)
        first, second = rate(both + first_only, n), rate(both + second_only, n)
    return PairedTest(
        measure=measure,
        stratum=stratum,
        pairs=n,
        tasks=len(tasks),
        first_rate=first,
        second_rate=second,
        difference=round(sum(sums) / n, 6) if n else None,
        difference_interval=cluster_mean_interval(sums, counts, seed) if n else None,
        mcnemar=table,
        sign_flip=sign_flip([s / c for s, c in zip(sums, counts, strict=True)], seed),
        holm_p_value=None,
        decision="no_difference_shown",
    )


def _decide(t: PairedTest, p: float, alpha: float) -> PairedTest:
    d = t.sign_flip.statistic
    decision: Literal["first_higher", "second_higher", "no_difference_shown"] = (
        "no_difference_shown"
    )
    if p <= alpha and d != 0:
        decision = "first_higher" if d > 0 else "second_higher"
    return t.model_copy(update={"decision": decision})


def compare_pair(
    first: tuple[str, CellOutcomes],
    second: tuple[str, CellOutcomes],
    blocked: Iterable[str],
    alpha: float,
    protocol_hash: str,
) -> PairedComparison:
    """Every paired test of two subjects. Overall is decided on its own sign-flip p (the
    headline, one test); each stratum on its Holm-adjusted p within its measure."""
    (a_id, a), (b_id, b) = first, second
    left_out = set(blocked)
    tests: list[PairedTest] = []
    for measure in MEASURES:
        per: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
        for slot, (task, stratum, fa, xa) in sorted(a.items()):
            other = b.get(slot)
            if other is None or stratum in left_out:
                continue
            fb, xb = other[2], other[3]
            if measure == "extra_tool_calls":
                if xa is None or xb is None:  # recovered with a baseline, in both subjects
                    continue
                pair = (task, xa, xb)
            elif measure == "without_duplicates":
                if not (fa & _EXPOSED and fb & _EXPOSED):
                    continue
                pair = (task, int(bool(fa & _NO_DUP)), int(bool(fb & _NO_DUP)))
            else:
                pair = (task, int(bool(fa & _COMPLETED)), int(bool(fb & _COMPLETED)))
            per[stratum].append(pair)
            per[OVERALL].append(pair)

        def seed(stratum: str, m: str = measure) -> int:
            return seed_from(protocol_hash, f"paired:{a_id}:{b_id}:{m}:{stratum}")

        overall = _test(measure, OVERALL, per.pop(OVERALL, []), seed(OVERALL))
        strata = {k: _test(measure, k, v, seed(k)) for k, v in sorted(per.items())}
        adjusted = holm({k: t.sign_flip.p_value for k, t in strata.items()})
        tests.append(_decide(overall, overall.sign_flip.p_value, alpha))
        for k, t in strata.items():
            t = t.model_copy(update={"holm_p_value": adjusted[k]})
            tests.append(_decide(t, adjusted[k], alpha))
    return PairedComparison(first=a_id, second=b_id, alpha=alpha, tests=tests)
