"""The statistics every rate and comparison carries (issue 25), from scipy, never by hand.

- A rate k/n gets its exact two-sided Clopper-Pearson 95 % interval (`scipy.stats.binomtest(...)
  .proportion_ci(method="exact")`). At k = 0 the exact *one-sided* upper bound is given instead
  (0/64 -> [0, 0.0457]): no event seen, the question is only how frequent it could still be
  (a duplicate rate, say). k = n keeps the two-sided interval (its low end is conservative).
- The mean of extra tool calls gets a task-clustered percentile bootstrap interval
  (`scipy.stats.bootstrap`, tasks resampled with their cells, so cells of one task never count
  as independent). Its seed is derived from the protocol hash and recorded beside the interval:
  same evidence -> same bytes.
- The median wall-time ratio gets an exact distribution-free interval for the median (the
  binomial order-statistic interval, `scipy.stats.binom`) over the tasks' own median ratios.
- A paired comparison has the exact McNemar test on its discordant pairs (`binomtest` on the
  b/c split), and as headline a task-clustered exact sign-flip test (`scipy.stats.
  permutation_test`, one sample of per-task mean differences, every sign flip enumerated up to
  EXACT_TASKS tasks, beyond that a seeded Monte Carlo with its standard error stated); p-values
  of one measure across strata are Holm-adjusted.
- Power for `bench plan`: see `planned_power`.

Every float leaves this module rounded to 6 places so the bytes do not depend on the last ulp of
a platform's libm.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from runner.evaluator.core.types import Frozen

CONFIDENCE = 0.95
DEFAULT_ALPHA = 0.05
DEFAULT_MDE = 0.2
EXACT_TASKS = 20  # 2^20 sign patterns: enumerated; more tasks -> seeded Monte Carlo
MONTE_CARLO_RESAMPLES = 9_999  # scipy's default; its standard error (<= 0.005) is reported
BOOTSTRAP_RESAMPLES = 9_999
# Resamples held at once: about BATCH_ELEMENTS task indices (and the values they draw), so a
# bootstrap over 50,000 tasks holds tens of MB, not GBs. The draws are the same whatever the
# batch (numpy's generator fills a (batch, tasks) block in order), hence so are the bounds.
BATCH_ELEMENTS = 2_000_000
MAX_BATCH = 1_000
PLACES = 6


def _r(x: float) -> float:
    return round(float(x), PLACES)


def _p(x: float) -> float:
    """A p-value to 6 significant digits: a small p keeps its size (1/128 stays 0.0078125)."""
    return float(f"{min(1.0, float(x)):.6g}")


class Interval(Frozen):
    """A 95 % interval. method: clopper_pearson (two-sided), clopper_pearson_upper (k = 0: the
    one-sided upper bound, low is 0), bootstrap_tasks (task-clustered percentile bootstrap,
    `seed` recorded), order_statistic_tasks (exact distribution-free interval for the median
    task)."""

    low: float
    high: float
    confidence: float = CONFIDENCE
    method: Literal[
        "clopper_pearson",
        "clopper_pearson_upper",
        "bootstrap_tasks",
        "order_statistic_tasks",
    ]
    seed: int | None = None


def seed_from(protocol_hash: str, purpose: str) -> int:
    """A 52-bit seed (a safe JSON integer) bound to the protocol and to what it is for:
    recorded beside the figure it drew, never drawn at random."""
    h = hashlib.sha256(f"{protocol_hash}\0{purpose}".encode()).digest()
    return int.from_bytes(h[:8], "big") >> 12


def proportion_interval(k: int, n: int, confidence: float = CONFIDENCE) -> Interval | None:
    """The exact interval of k successes in n trials; None for n = 0 (no rate, no interval)."""
    if n <= 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"{k}/{n} is not a proportion")
    if k == 0:
        ci = stats.binomtest(0, n, alternative="less").proportion_ci(confidence, method="exact")
        return Interval(low=0.0, high=_r(ci.high), method="clopper_pearson_upper")
    ci = stats.binomtest(k, n).proportion_ci(confidence, method="exact")
    # Rounding may move a bound past the 6-place point estimate by < 1e-6: keep it inside.
    p = round(k / n, PLACES)
    return Interval(low=min(_r(ci.low), p), high=max(_r(ci.high), p), method="clopper_pearson")


def cluster_mean_interval(
    sums: Sequence[float], counts: Sequence[int], seed: int
) -> Interval | None:
    """Interval of sum(sums)/sum(counts) with tasks resampled whole (each task: the sum of its
    cells' values and their count). None below two tasks: one cluster has no spread to resample."""
    keep = [i for i, n in enumerate(counts) if n > 0]  # a task without cells says nothing
    s = np.asarray([sums[i] for i in keep], dtype=float)
    c = np.asarray([counts[i] for i in keep], dtype=float)
    if len(s) < 2:
        return None
    if np.all(s / c == s[0] / c[0]):  # every task has the same mean: nothing to resample
        v = _r(s.sum() / c.sum())
        return Interval(low=v, high=v, method="bootstrap_tasks", seed=seed)

    def ratio(
        a: NDArray[np.float64], b: NDArray[np.float64], axis: int = -1
    ) -> NDArray[np.float64]:
        tot: NDArray[np.float64] = b.sum(axis=axis)
        out: NDArray[np.float64] = np.divide(
            a.sum(axis=axis), tot, out=np.zeros_like(tot), where=tot > 0
        )
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples: scipy warns, the bounds stand
        res = stats.bootstrap(
            (s, c),
            ratio,
            paired=True,
            vectorized=True,
            n_resamples=BOOTSTRAP_RESAMPLES,
            batch=max(1, min(MAX_BATCH, BATCH_ELEMENTS // len(s))),
            method="percentile",
            confidence_level=CONFIDENCE,
            rng=np.random.default_rng(seed),
        )
    point = round(float(s.sum() / c.sum()), PLACES)
    low, high = _r(res.confidence_interval.low), _r(res.confidence_interval.high)
    return Interval(low=min(low, point), high=max(high, point), method="bootstrap_tasks", seed=seed)


def median_interval(values: Sequence[float]) -> Interval | None:
    """Exact distribution-free interval for the median of `values` (the tasks' median ratios):
    the widest-needed pair of order statistics x(j) <= m <= x(n+1-j) whose binomial coverage
    is >= 95 %; None when no pair of order statistics reaches it (too few tasks)."""
    x = sorted(float(v) for v in values)
    n = len(x)
    if n == 0:
        return None
    best: int | None = None
    # the binomial CDF at every k at once (the same values, elementwise, as one call per k)
    cdf = stats.binom.cdf(np.arange(n + 1), n, 0.5)
    for j in range(1, n // 2 + 1):  # coverage P(j <= B < n+1-j), B ~ Binomial(n, 1/2)
        coverage = float(cdf[n - j] - cdf[j - 1])
        if coverage >= CONFIDENCE:
            best = j
        else:
            break
    if best is None:
        return None
    return Interval(low=_r(x[best - 1]), high=_r(x[n - best]), method="order_statistic_tasks")


# ------------------------------------------------------------------------------ paired tests


class McNemar(Frozen):
    """The 2x2 table of paired binary outcomes and the exact (conditional binomial) McNemar
    test on its discordant pairs; p = 1 when every pair is concordant."""

    both: int
    first_only: int
    second_only: int
    neither: int
    p_value: float


def mcnemar_exact(both: int, first_only: int, second_only: int, neither: int) -> McNemar:
    d = first_only + second_only
    p = 1.0 if d == 0 else float(stats.binomtest(first_only, d, 0.5).pvalue)
    return McNemar(
        both=both,
        first_only=first_only,
        second_only=second_only,
        neither=neither,
        p_value=_p(p),
    )


class SignFlip(Frozen):
    """Task-clustered sign-flip test of the mean per-task difference (H0: each task's difference
    is symmetric about 0). exact: every one of 2^tasks sign patterns enumerated; otherwise a
    seeded Monte Carlo of `resamples` patterns, with its standard error."""

    tasks: int
    statistic: float  # mean over tasks of the per-task mean difference (first - second)
    p_value: float
    exact: bool
    resamples: int | None
    seed: int | None
    monte_carlo_standard_error: float | None


def sign_flip(diffs: Sequence[float], seed: int) -> SignFlip:
    """`diffs`: one mean difference per task. No task, or every difference 0: p = 1."""
    d = np.asarray(diffs, dtype=float)
    t = len(d)
    if t == 0 or not np.any(d):
        return SignFlip(
            tasks=t,
            statistic=0.0,
            p_value=1.0,
            exact=True,
            resamples=None,
            seed=None,
            monte_carlo_standard_error=None,
        )
    exact = t <= EXACT_TASKS
    if exact:
        p = _exact_sign_flip_p(d)
    else:

        def mean(x: NDArray[np.float64], axis: int = -1) -> NDArray[np.float64]:
            m: NDArray[np.float64] = np.mean(x, axis=axis)
            return m

        res = stats.permutation_test(
            (d,),
            mean,
            permutation_type="samples",  # one sample: the null flips each task's sign
            vectorized=True,
            n_resamples=MONTE_CARLO_RESAMPLES,
            batch=max(1, min(MAX_BATCH, BATCH_ELEMENTS // t)),
            alternative="two-sided",
            rng=np.random.default_rng(seed),
        )
        p = float(res.pvalue)
    p = min(1.0, p)
    se = None if exact else _p(math.sqrt(p * (1 - p) / MONTE_CARLO_RESAMPLES))
    return SignFlip(
        tasks=t,
        statistic=_r(float(np.mean(d))),
        p_value=_p(p),
        exact=exact,
        resamples=None if exact else MONTE_CARLO_RESAMPLES,
        seed=None if exact else seed,
        monte_carlo_standard_error=se,
    )


def _sign_sums(d: NDArray[np.float64]) -> NDArray[np.float64]:
    """sum(s_i d_i) for every sign pattern s of d (2^len(d) values)."""
    out = np.zeros(1)
    for x in d:
        out = np.concatenate((out + x, out - x))
    return out


def _exact_sign_flip_p(d: NDArray[np.float64]) -> float:
    """The two-sided p of the sign-flip null enumerated exactly, as scipy.stats.permutation_test
    computes it with n_resamples=inf (same tie tolerance; tests compare the two), but split in
    two halves whose sums are combined by sorting: 2^20 patterns in milliseconds, not seconds."""
    observed = float(d.sum())
    gamma = abs(observed) * np.finfo(float).eps * 100  # scipy's tolerance for equal statistics
    half = len(d) // 2
    a, b = _sign_sums(d[:half]), np.sort(_sign_sums(d[half:]))
    total = len(a) * len(b)
    # pattern sums a + b compared with the observed sum, counted per a by binary search in b
    less = int(np.searchsorted(b, observed + gamma - a, side="right").sum())
    greater = int((len(b) - np.searchsorted(b, observed - gamma - a, side="left")).sum())
    return min(1.0, 2 * min(less, greater) / total)


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment across a family (here: the strata of one measure)."""
    order = sorted(p_values, key=lambda k: (p_values[k], k))
    m = len(order)
    out: dict[str, float] = {}
    running = 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[k]))
        out[k] = _p(running)
    return out


# ------------------------------------------------------------------------------------- power


class Power(Frozen):
    """The preregistered power of one planned paired comparison (see `planned_power`)."""

    tasks: int
    pairs: int
    alpha: float
    minimum_detectable_effect: float
    smallest_attainable_p: float
    power: float


def planned_power(tasks: int, pairs: int, alpha: float, mde: float) -> Power:
    """Power of the task-clustered two-sided test to detect a difference of `mde` in a rate.

    The exact sign-flip test over `tasks` tasks cannot return p below 2 / 2^tasks: if that
    exceeds alpha the power is 0, however many cells there are. Otherwise the normal
    approximation of a paired difference of proportions at its worst-case variance (both rates
    near 1/2, independent outcomes: var of one pair's difference <= 1/2) over the pairs:
    power = Phi(mde / sqrt(1/(2 pairs)) - z_{1-alpha/2}). Clustering only lowers the effective
    number of pairs, so this is an upper bound when cells of a task are correlated.
    """
    floor = 2.0 / 2.0 ** min(tasks, 1000) if tasks > 0 else 1.0
    if tasks == 0 or pairs == 0 or floor > alpha:
        power = 0.0
    else:
        z = float(stats.norm.ppf(1 - alpha / 2))
        power = float(stats.norm.cdf(mde / math.sqrt(0.5 / pairs) - z))
    return Power(
        tasks=tasks,
        pairs=pairs,
        alpha=alpha,
        minimum_detectable_effect=mde,
        smallest_attainable_p=_p(floor),
        power=_r(power),
    )
