"""Issue 25: the evaluator's statistics against scipy, at the edges, as invariants, and as they
reach scorecards, comparisons, replicates, plans and bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sst
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish import stats as S
from runner.evaluator.publish.compare import compare
from runner.evaluator.publish.results import derive, write_results
from tests.evidence.synth import SPEC_AB, Run, evaluated_run

cli = CliRunner()

# ----------------------------------------------------------------------------- against scipy


@pytest.mark.parametrize(
    "k,n", [(1, 2), (3, 64), (32, 64), (63, 64), (64, 64), (1, 1), (5, 7), (1, 1000)]
)
def test_clopper_pearson_is_scipys_exact_interval(k: int, n: int) -> None:
    ci = sst.binomtest(k, n).proportion_ci(0.95, method="exact")
    got = S.proportion_interval(k, n)
    assert got is not None and got.method == "clopper_pearson"
    assert got.low == pytest.approx(ci.low, abs=1e-6)
    assert got.high == pytest.approx(ci.high, abs=1e-6)
    # and the textbook beta-quantile form of the same interval (1 at k = n)
    assert got.low == pytest.approx(sst.beta.ppf(0.025, k, n - k + 1), abs=1e-6)
    assert got.high == pytest.approx(1.0 if k == n else sst.beta.ppf(0.975, k + 1, n - k), abs=1e-6)


def test_zero_count_is_the_exact_one_sided_upper_bound() -> None:
    i = S.proportion_interval(0, 64)
    assert i is not None and i.method == "clopper_pearson_upper"
    assert (i.low, i.high) == (0.0, 0.04573)  # 0/64 -> at most 4.6 %
    for n in (1, 2, 10, 500):
        j = S.proportion_interval(0, n)
        assert j is not None and j.high == pytest.approx(1 - 0.05 ** (1 / n), abs=1e-6)


def test_full_count_is_two_sided_and_n_1_is_defined() -> None:
    i = S.proportion_interval(64, 64)
    assert i is not None and i.method == "clopper_pearson"
    assert (i.low, i.high) == (round(0.025 ** (1 / 64), 6), 1.0)
    one = S.proportion_interval(1, 1)
    assert one is not None and one.low == pytest.approx(0.025)
    assert S.proportion_interval(0, 0) is None
    with pytest.raises(ValueError):
        S.proportion_interval(3, 2)


@pytest.mark.parametrize(
    "table", [(10, 5, 1, 48), (0, 0, 0, 64), (30, 0, 0, 34), (1, 7, 0, 2), (0, 3, 3, 0)]
)
def test_mcnemar_is_the_exact_binomial_test_on_discordant_pairs(
    table: tuple[int, int, int, int],
) -> None:
    m = S.mcnemar_exact(*table)
    b, c = table[1], table[2]
    want = 1.0 if b + c == 0 else sst.binomtest(b, b + c, 0.5).pvalue
    assert m.p_value == pytest.approx(want, abs=1e-6)
    assert (m.both, m.first_only, m.second_only, m.neither) == table


@pytest.mark.parametrize("seed", range(12))
def test_exact_sign_flip_is_scipys_enumerated_permutation_test(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = rng.integers(-3, 4, size=2 + seed % 11) / 4.0  # ties and zeros on purpose
    if not d.any():
        d[0] = 0.25
    want = sst.permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=np.inf
    ).pvalue
    got = S.sign_flip(list(d), seed=1)
    assert got.exact and got.resamples is None
    assert got.p_value == pytest.approx(want, abs=1e-6)


def test_eight_tasks_cannot_go_below_1_in_128() -> None:
    assert S.sign_flip([0.5] * 8, 0).p_value == 1 / 128


def test_beyond_twenty_tasks_a_seeded_monte_carlo_with_its_error() -> None:
    d = [0.1 * ((i % 5) - 1) for i in range(25)]
    a, b = S.sign_flip(d, 7), S.sign_flip(d, 7)
    assert a == b and not a.exact and a.seed == 7 and a.resamples == S.MONTE_CARLO_RESAMPLES
    assert a.monte_carlo_standard_error is not None and a.monte_carlo_standard_error < 0.01


def test_no_difference_at_all_is_p_1() -> None:
    assert S.sign_flip([0.0, 0.0, 0.0], 0).p_value == 1.0
    assert S.sign_flip([], 0).p_value == 1.0


def test_holm_against_its_definition() -> None:
    p = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5}
    adj = S.holm(p)
    assert adj == {"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5}
    # step-down: monotone in the raw order, never below the raw p, at most 1
    assert all(adj[k] >= p[k] for k in p) and max(adj.values()) <= 1


def test_cluster_interval_is_seeded_and_contains_the_mean() -> None:
    sums, counts = [3, 5, 0, 2, 7], [2, 2, 1, 3, 2]
    a = S.cluster_mean_interval(sums, counts, 11)
    assert a == S.cluster_mean_interval(sums, counts, 11) and a is not None and a.seed == 11
    assert a.low <= sum(sums) / sum(counts) <= a.high
    assert S.cluster_mean_interval([4], [2], 1) is None  # one task: nothing to resample


@pytest.mark.parametrize("tasks", [7, 300])
def test_resampling_memory_batches_do_not_change_a_figure(
    tasks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch bounds memory (a bootstrap over 50,000 tasks held GBs with 1,000 resamples at
    once); the generator's draws, hence every bound and p, are the same whatever it is."""
    rng = np.random.default_rng(tasks)
    sums, counts = list(rng.random(tasks) * 4), [int(c) for c in rng.integers(1, 4, tasks)]
    diffs = list(rng.normal(0.1, 1, tasks))
    default = (S.cluster_mean_interval(sums, counts, 5), S.sign_flip(diffs, 5))
    for batch in (13, 997, 10**6):  # small and odd batches, and all at once
        monkeypatch.setattr(S, "BATCH_ELEMENTS", batch * tasks)
        assert (S.cluster_mean_interval(sums, counts, 5), S.sign_flip(diffs, 5)) == default


def test_median_interval_is_the_order_statistic_one() -> None:
    x = [1.0, 1.1, 0.9, 1.5, 1.3, 1.2, 1.4, 1.25]
    i = S.median_interval(x)
    # n = 8: x(1)..x(8) is the only pair with coverage >= 95 % (0.992; x(2)..x(7) is 0.930)
    assert i is not None and (i.low, i.high) == (0.9, 1.5)
    assert S.median_interval([1.0] * 5) is None  # 5 tasks cannot reach 95 %


# -------------------------------------------------------------------------------- invariants


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_an_interval_always_contains_its_estimate(kn: tuple[int, int]) -> None:
    k, n = kn
    i = S.proportion_interval(k, n)
    assert i is not None and 0.0 <= i.low <= round(k / n, 6) <= i.high <= 1.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-4, 4).map(lambda v: v / 4), max_size=24),
    st.tuples(*[st.integers(0, 30)] * 4),
)
def test_p_values_lie_in_0_1(diffs: list[float], table: tuple[int, int, int, int]) -> None:
    assert 0.0 <= S.sign_flip(diffs, 3).p_value <= 1.0
    assert 0.0 <= S.mcnemar_exact(*table).p_value <= 1.0
    adj = S.holm({str(i): p for i, p in enumerate([0.0, 0.3, 1.0])})
    assert all(0.0 <= v <= 1.0 for v in adj.values())


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.integers(0, 400), st.sampled_from([0.01, 0.05, 0.1, 0.5]))
def test_power_is_a_probability_and_zero_when_unreachable(t: int, n: int, alpha: float) -> None:
    p = S.planned_power(t, n, alpha, 0.2)
    assert 0.0 <= p.power <= 1.0
    if t == 0 or 2 / 2**t > alpha:
        assert p.power == 0.0


# ---------------------------------------------------------------------- scorecards and runs


def _rates(doc: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every Ratio object in a JSON document, with where it is."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(doc, dict):
        if {"numerator", "denominator", "value"} <= doc.keys():
            out.append((path, doc))
        for k, v in doc.items():
            out += _rates(v, f"{path}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _rates(v, f"{path}/{i}")
    return out


def _check_rate_interval(where: str, r: dict[str, Any]) -> None:
    k, n = r["numerator"], r["denominator"]
    i = r.get("interval")
    assert i is not None, f"{where}: a rate without its interval"
    if k == 0:
        want = (0.0, sst.binomtest(0, n, alternative="less").proportion_ci(0.95).high)
    else:
        ci = sst.binomtest(k, n).proportion_ci(0.95, method="exact")
        want = (ci.low, ci.high)
    assert (i["low"], i["high"]) == pytest.approx(want, abs=1e-6), where


def test_every_rate_in_a_scorecard_carries_its_exact_interval(tmp_path: Path) -> None:
    run = evaluated_run(tmp_path / "r", lambda i, s: "duplicate" if i % 3 == 0 else "completed")
    for subject in ("a", "b"):
        card = json.loads((run / f"results/{subject}/scorecard.json").read_text())
        ratios = _rates(card)
        assert ratios
        for where, r in ratios:
            if where.endswith("extra_tool_calls_mean"):
                assert r.get("interval") is None or r["interval"]["method"] == "bootstrap_tasks"
                continue
            _check_rate_interval(where, r)
        split = card["retries"]["overall"]
        assert split["first_attempt"]["cells"] + split["after_retry"]["cells"] == 20
        dup = card["overall"]["duplicate_effects"]
        assert dup["duplicate_rate"]["numerator"] == dup["cells_with_duplicates"]
        assert "replicates" not in card  # no [matrix] replicates: the key is absent
        if subject == "a":  # 0 of 16 exposed cells duplicated: at most 17 % by the exact bound
            assert dup["duplicate_rate"]["interval"] == {"low": 0.0, "high": 0.17075,
                "confidence": 0.95, "method": "clopper_pearson_upper", "seed": None}  # fmt: skip
        md = (run / f"results/{subject}/scorecard.md").read_text()
        assert "Decided on the first attempt" in md and "[" in md


def test_a_retried_cell_is_reported_apart(tmp_path: Path) -> None:
    r = Run(tmp_path / "r")
    r.fill("a", lambda i, s: "completed")
    cells = r.cells("b")
    for i, (cell, slot) in enumerate(cells):
        if i == 1:  # a harness error, then the retry completes it
            r.write_attempt("b", cell, slot, 1, "harness")
            r.write_attempt("b", cell, slot, 2, "completed")
        else:
            r.write_attempt("b", cell, slot, 1, "completed")
    _, _, files = derive(r.run_dir, evaluator_digest())
    card = json.loads(files["results/b/scorecard.json"])
    split = card["retries"]["overall"]
    assert split["after_retry"] == {
        "cells": 1,
        "completed": 1,
        "rate": {
            "numerator": 1,
            "denominator": 1,
            "value": 1.0,
            "interval": {"low": 0.025, "high": 1.0, "confidence": 0.95,
                         "method": "clopper_pearson", "seed": None},
        },
    }  # fmt: skip
    assert split["first_attempt"]["cells"] == 19


def test_comparison_carries_paired_tests(tmp_path: Path) -> None:
    # b duplicates on every exposed cell of the two easy tasks: 2 tasks only, so even an
    # all-one-way difference is not significant by the task-clustered test (p >= 1/2).
    run = evaluated_run(
        tmp_path / "r",
        lambda i, s: "duplicate" if s.task_id.startswith("e") else "completed",
    )
    comparison, reasons = compare(
        [run / "results/a/scorecard.json", run / "results/b/scorecard.json"]
    )
    assert reasons == [] and comparison is not None and comparison.paired is not None
    [pc] = comparison.paired
    assert (pc.first, pc.second, pc.alpha) == ("a", "b", 0.05)
    by = {(t.measure, t.stratum): t for t in pc.tests}
    comp = by[("completion", "all")]
    assert comp.mcnemar.first_only == comp.mcnemar.second_only == 0  # all pairs concordant
    assert comp.mcnemar.p_value == 1.0 and comp.sign_flip.p_value == 1.0
    assert comp.decision == "no_difference_shown"
    dup = by[("without_duplicates", "all")]
    assert dup.pairs == 16 and dup.tasks == 4 and dup.mcnemar.first_only == 8
    assert dup.mcnemar.p_value == pytest.approx(sst.binomtest(8, 8).pvalue, abs=1e-6)
    # per task mean difference: 1, 1, 0, 0 -> exact sign-flip p = 2 * 1/4 = 0.5
    assert dup.sign_flip.exact and dup.sign_flip.p_value == 0.5
    assert dup.decision == "no_difference_shown"  # never "better" without its test
    extra = by[("extra_tool_calls", "all")]  # same calls everywhere: no difference at all
    assert extra.mcnemar is None and extra.first_rate is None and extra.pairs == 16
    assert extra.difference == 0 and extra.sign_flip.p_value == 1.0
    strata = [t for t in pc.tests if t.measure == "without_duplicates" and t.stratum != "all"]
    assert strata and all(t.holm_p_value is not None for t in strata)
    assert all(t.holm_p_value >= t.sign_flip.p_value for t in strata)  # type: ignore[operator]
    # the in-run comparison has the same tests
    written = json.loads((run / "results/comparison.json").read_text())
    assert written["paired"] == json.loads(comparison.model_dump_json())["paired"]
    md = (run / "results/comparison.md").read_text()
    assert "sign-flip" in md and "no difference shown" in md and "better" not in md


def test_paired_extra_tool_calls_is_the_mean_difference(tmp_path: Path) -> None:
    r = Run(tmp_path / "r")
    r.fill("a", lambda i, s: ("completed", 8 if s.schedule.kind == "none" else 11))
    r.fill("b", lambda i, s: ("completed", 8 if s.schedule.kind == "none" else 9))
    _, _, files = derive(r.run_dir, evaluator_digest())
    doc = json.loads(files["results/comparison.json"])
    [t] = [t for t in doc["paired"][0]["tests"]
           if (t["measure"], t["stratum"]) == ("extra_tool_calls", "all")]  # fmt: skip
    assert t["pairs"] == 16 and t["difference"] == 2.0 and t["mcnemar"] is None
    # every one of 4 tasks +2: the smallest p 4 tasks allow, 2/16, so not shown at 0.05
    assert t["sign_flip"]["p_value"] == 0.125 and t["decision"] == "no_difference_shown"


def test_paired_tests_need_the_rows_they_bind(tmp_path: Path) -> None:
    """A tampered rows file gives no paired statistics (and still no refusal: statistics are
    reported, never used to admit a comparison)."""
    run = evaluated_run(tmp_path / "r")
    rows = run / "results/b/cell-scores.jsonl"
    rows.write_bytes(rows.read_bytes().replace(b'"COMPLETED"', b'"FAILED"', 1))
    comparison, reasons = compare(
        [run / "results/a/scorecard.json", run / "results/b/scorecard.json"]
    )
    assert reasons == [] and comparison is not None and comparison.paired is None


# ------------------------------------------------------------------------------- replicates


def _spec(tmp_path: Path, matrix_extra: str = "", comparison: str = "") -> Path:
    text = SPEC_AB.read_text().replace("seeds = [1]", f"seeds = [1]\n{matrix_extra}")
    if comparison:
        text += f"\n[comparison]\n{comparison}\n"
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def test_replicates_are_own_slots_with_the_same_schedule(tmp_path: Path) -> None:
    base = resolve(load_spec(SPEC_AB)).slots
    rep = resolve(load_spec(_spec(tmp_path, "replicates = 3"))).slots
    assert len(rep) == 3 * len(base) and len({s.slot_id for s in rep}) == len(rep)
    first = [s for s in rep if s.replicate == 0]
    assert first == base  # replicate 0 is the slot as before
    for s in rep:
        twin = next(
            b for b in base if (b.task_id, b.schedule.fault_id) == (s.task_id, s.schedule.fault_id)
        )
        assert s.schedule == twin.schedule


def test_absent_or_one_replicate_and_absent_alpha_hash_as_before(tmp_path: Path) -> None:
    old = compute(load_spec(SPEC_AB), SPEC_AB)
    for extra, cmp in [("replicates = 1", ""), ("", "")]:
        p = _spec(tmp_path, extra, cmp)
        ids = compute(load_spec(p), p)
        assert (ids.matrix_hash, ids.policy_hash, ids.cell_set_hash) == (
            old.matrix_hash, old.policy_hash, old.cell_set_hash,
        )  # fmt: skip
    p = _spec(tmp_path, "", "alpha = 0.01")
    assert compute(load_spec(p), p).policy_hash != old.policy_hash  # a set key is hashed


def test_replicates_report_pass_k_and_flips(tmp_path: Path) -> None:
    p = _spec(tmp_path, "replicates = 2")
    r = Run(tmp_path / "r", spec_path=p)
    r.fill("a", lambda i, s: "completed")  # deterministic: never flips
    # b flips on replicate 1 of the easy tasks' faulted cells
    r.fill("b", lambda i, s: "duplicate" if s.replicate and s.task_id[0] == "e" and
           s.schedule.kind != "none" else "completed")  # fmt: skip
    _, _, files = derive(r.run_dir, evaluator_digest())
    a = json.loads(files["results/a/scorecard.json"])["replicates"]
    b = json.loads(files["results/b/scorecard.json"])["replicates"]
    assert a["replicates"] == 2 and a["groups"] == 20
    assert a["flipped"]["numerator"] == 0 and a["verdict_variance_mean"] == 0
    assert a["pass_all"]["numerator"] == 20
    assert b["flipped"]["numerator"] == 8 and b["pass_all"]["numerator"] == 12
    assert b["verdict_variance_mean"] == pytest.approx(8 * 0.25 / 20)
    write_results(r.run_dir, files)
    assert "pass^k" in (r.run_dir / "results/b/scorecard.md").read_text()


# ----------------------------------------------------------------------- plan and bad input


def test_plan_states_power_and_warns(tmp_path: Path) -> None:
    res = cli.invoke(app, ["plan", str(SPEC_AB)])
    assert res.exit_code == 0, res.output
    assert "power" in res.output and "below 80 %" in res.output
    spec = _spec(tmp_path, "replicates = 4", "alpha = 0.1\nminimum_detectable_effect = 0.5")
    res = cli.invoke(app, ["plan", "--json", str(spec)])
    doc = json.loads(res.stdout)  # a warning goes to stderr
    power = doc["power"]
    assert power["alpha"] == 0.1 and power["minimum_detectable_effect"] == 0.5
    assert power["comparisons"] and all(0 <= c["power"] <= 1 for c in power["comparisons"])


@pytest.mark.parametrize(
    "matrix,comparison,key",
    [
        ("replicates = 0", "", "matrix.replicates"),
        ("", "alpha = 0.0", "comparison.alpha"),
        ("", "alpha = 0.6", "comparison.alpha"),
        ("", "minimum_detectable_effect = 0.0", "comparison.minimum_detectable_effect"),
        ("", "minimum_detectable_effect = 1.5", "comparison.minimum_detectable_effect"),
    ],
)
def test_bad_statistics_keys_exit_2_naming_the_key(
    tmp_path: Path, matrix: str, comparison: str, key: str
) -> None:
    res = cli.invoke(app, ["plan", str(_spec(tmp_path, matrix, comparison))])
    assert res.exit_code == 2 and key in res.output and "Traceback" not in res.output


def test_power_vectors() -> None:
    # 8 tasks: the exact task-level test can reach 1/128 < 0.05
    p = S.planned_power(8, 64, 0.05, 0.2)
    z = sst.norm.ppf(0.975)
    assert p.power == pytest.approx(sst.norm.cdf(0.2 / np.sqrt(0.5 / 64) - z), abs=1e-6)
    assert S.planned_power(4, 1000, 0.05, 0.2).power == 0.0  # 2/16 > 0.05: unreachable
    assert S.planned_power(5, 1000, 0.1, 0.2).power > 0.99


def test_exhaustive_small_sign_flip_by_hand() -> None:
    d = [1.0, 0.5, -0.25]
    obs = sum(d)
    sums = [sum(s * x for s, x in zip(signs, d, strict=True))
            for signs in itertools.product((1, -1), repeat=3)]  # fmt: skip
    want = min(1.0, 2 * min(sum(v >= obs for v in sums), sum(v <= obs for v in sums)) / 8)
    assert S.sign_flip(d, 0).p_value == pytest.approx(want)


def test_rows_written_before_the_paired_fields_give_no_paired_tests() -> None:
    from runner.evaluator.publish.paired import cell_outcomes

    old = (
        b'{"cell_id":"sha256:1","duplicate_effects":0,"exposed":false,"extra_tool_calls":null,'
        b'"status":"COMPLETED","stratum":"all","wall_time_ratio":null}\n'
    )
    assert cell_outcomes(old) is None


def test_bench_compare_states_the_headline_tests(tmp_path: Path) -> None:
    from tests.evidence.test_registry_compare import _new_registry

    run = evaluated_run(tmp_path / "r", lambda i, s: "duplicate" if i % 2 else "completed")
    res = cli.invoke(app, ["compare", str(run / "results/a/scorecard.json"),
                           str(run / "results/b/scorecard.json"), "--out", str(tmp_path / "c"),
                           "--registry", str(_new_registry(tmp_path / "reg.jsonl"))])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "task sign-flip p" in res.output and "without_duplicates" in res.output
    doc = json.loads((tmp_path / "c/comparison.json").read_text())
    assert doc["alpha"] == 0.05 and doc["paired"][0]["tests"]


def test_regrade_brings_a_published_bundle_to_the_new_form(tmp_path: Path) -> None:
    """The newest published bundle predates issue 25: regraded, every rate has its interval,
    each card links the old one by derived_from, and the comparison has its paired tests."""
    from runner.evaluator.core.canonical import fast_digest
    from runner.evaluator.publish.regrade import regrade

    published = Path(__file__).resolve().parents[2] / "vectors" / "published"
    bundle = published / "swe-lite-agents-20261201T225113Z-e4c56d"
    old_card = json.loads(next(bundle.glob("results/*/scorecard.json")).read_text())
    assert not any("interval" in r for _, r in _rates(old_card))  # the old form
    done = regrade(bundle, tmp_path / "new", evaluator_digest())
    for subject, result in done.results.items():
        card = result.scorecard
        assert card is not None and card.derived_from == done.derived_from[subject]
        old = json.loads((bundle / f"results/{subject}/scorecard.json").read_text())
        assert card.derived_from == fast_digest(old)
        doc = json.loads((tmp_path / f"new/results/{subject}/scorecard.json").read_text())
        for where, r in _rates(doc):
            if not where.endswith("extra_tool_calls_mean"):
                _check_rate_interval(where, r)
    comparison = json.loads((tmp_path / "new/results/comparison.json").read_text())
    assert comparison["paired"] and comparison["alpha"] == 0.05
