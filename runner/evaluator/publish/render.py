"""Deterministic Markdown for results; rendered from the JSON models only, so `verify` can
re-render and compare bytes. An incomplete report renders no performance figure at all."""

from __future__ import annotations

from .models import (
    CellHistory,
    DuplicateEffects,
    IncompleteEvidenceReport,
    Measures,
    PublishableScorecard,
    Ratio,
    Truthfulness,
    TruthMeasures,
)
from .stats import Interval
from .truthfulness import ATTRIBUTION, JOIN, TOLD


def ci(i: Interval | None) -> str:
    """An interval as text: one-sided bounds say so (0/64 -> "<= 0.046")."""
    if i is None:
        return ""
    if i.method == "clopper_pearson_upper":
        return f" [<= {i.high:.3f}]"
    return f" [{i.low:.3f}, {i.high:.3f}]"


def _r(r: Ratio | None) -> str:
    if r is None:
        return "n/a"
    return f"{r.numerator}/{r.denominator} ({r.value:.3f}){ci(r.interval)}"


def _dup_rate(d: DuplicateEffects) -> str:
    """The share of exposed cells with a duplicate, with its interval (0/n: an upper bound)."""
    r = d.duplicate_rate
    return "" if r is None else f" (cells: {r.numerator}/{r.denominator}{ci(r.interval)})"


def _row(name: str, m: Measures) -> str:
    """One group's row; `-` where a measure is not carried or not defined for the group."""
    c, d, o = m.completion, m.duplicate_effects, m.recovery_overhead
    comp = "-" if c is None else f"{_r(c.rate)} ({c.pre_trigger_failures})"
    dups = "-" if d is None else f"{d.duplicate_effects} / {d.exposed_cells}{_dup_rate(d)}"
    share = "-" if d is None else _r(d.share_without_duplicates)
    extra = (
        "-"
        if o is None
        else (
            "n/a"
            if o.extra_tool_calls_mean is None
            else f"{o.extra_tool_calls_mean.value:+.2f}{ci(o.extra_tool_calls_mean.interval)}"
        )
    )
    pairs = "-" if o is None else f"{o.pairs}"
    wall = (
        "-"
        if o is None or o.wall_time_ratio_median is None
        else f"{o.wall_time_ratio_median:.2f}x{ci(o.wall_time_ratio_median_interval)}"
    )
    return f"| {name} | {comp} | {dups} | {share} | {extra} | {pairs} | {wall} |"


def scorecard_md(s: PublishableScorecard) -> str:
    cov = s.proof.coverage
    lines = [
        f"# Scorecard: {s.subject_id}",
        "",
        f"- protocol: `{s.protocol_id}` `{s.protocol_hash}`",
        f"- subject_config_hash: `{s.subject_config_hash}`",
        f"- policy_hash: `{s.policy_hash}`",
        f"- evaluator_digest: `{s.evaluator_digest}`",
        f"- evidence_root_hash: `{s.evidence_root_hash}`",
        f"- eligibility proof: `{s.proof_hash}` ({cov.decided}/{cov.registered} cells decided; "
        f"faults witnessed {cov.witnessed}/{cov.scheduled}, {cov.pre_trigger_failures} "
        f"pre-trigger failures; {cov.baseline} baseline cells)",
        f"- environment conformance: `{s.environment_conformance or 'none required'}`",
        f"- measures: {', '.join(s.measures) or 'none'}",
    ]
    if s.subject_role == "oracle":
        lines.append("- role: **oracle** (given the known answer: validates the benchmark)")
    elif s.subject_role == "agent":
        lines.append("- role: agent (given the task's agent view only)")
    if s.derived_from:
        lines.append(f"- derived from scorecard `{s.derived_from}` (regraded)")
    if s.scenario_mismatch_strata:
        shown = ", ".join(f"`{x}`" for x in s.scenario_mismatch_strata)
        lines.append(f"- scenario mismatch (never compared): {shown}")
    lines += [
        "",
        "| stratum | completion (pre-trigger failures) | duplicate effects / exposed cells "
        "| exposed cells without duplicates | extra tool calls (mean) | pairs "
        "| wall-time ratio (median) |",
        "|---|---|---|---|---|---|---|",
        _row("**all**", s.overall),
    ]
    lines += [_row(k, m) for k, m in sorted(s.strata.items())]
    lines += [
        "",
        "Intervals are 95 %: exact Clopper-Pearson for rates (at 0/n the one-sided upper bound), a "
        "task-clustered bootstrap (seed recorded in the JSON) for the mean of extra tool calls, "
        "an exact order-statistic interval over tasks for the median wall-time ratio.",
    ]
    lines += _retries(s) + _replicates(s)
    if s.truthfulness is not None:
        lines += truthfulness_md(s.truthfulness)
    return "\n".join(lines) + "\n"


def _retries(s: PublishableScorecard) -> list[str]:
    if s.retries is None:
        return []
    out = [
        "",
        "## Decided on the first attempt vs after a retry",
        "",
        "| stratum | first attempt: completed / cells | after a retry: completed / cells |",
        "|---|---|---|",
    ]
    for name, r in [("**all**", s.retries.overall), *sorted(s.retries.strata.items())]:
        out.append(f"| {name} | {_r(r.first_attempt.rate)} | {_r(r.after_retry.rate)} |")
    return out


def _replicates(s: PublishableScorecard) -> list[str]:
    r = s.replicates
    if r is None:
        return []
    return [
        "",
        f"## Replicates (k = {r.replicates}, {r.groups} task x fault x seed groups)",
        "",
        f"- pass^k (every replicate completed without a duplicate): {_r(r.pass_all)}",
        f"- verdict flipped across replicates: {_r(r.flipped)}; mean verdict variance "
        f"{r.verdict_variance_mean}",
    ]


def _truth_row(name: str, m: TruthMeasures) -> str:
    told = " / ".join(str(m.told[k]) for k in TOLD)
    join = " / ".join(str(m.join[k]) for k in JOIN)
    att = " / ".join(str(m.attribution[k]) for k in ATTRIBUTION)
    n = m.exposed_irreversible_cells
    return f"| {name} | {n} | {told} | {join} | {m.duplicate_effects} | {att} |"


def truthfulness_md(t: Truthfulness) -> list[str]:
    """The truthfulness section (issue 23): what the framework told its model, who duplicated."""
    policy = t.model_policy or "not declared"
    return [
        "",
        "## What the framework told the model, and who duplicated",
        "",
        f"- rule: `{t.rule_version}`; model: {'yes' if t.model else 'no'}; "
        f"model policy: {policy}",
        f"- {t.statement}",
        f"- truthful: {_r(t.overall.truthful)}; the framework's duplicates: "
        f"{t.overall.framework_duplicates} of {t.overall.duplicate_effects}",
        "",
        "| stratum | exposed irreversible calls | told: " + " / ".join(TOLD)
        + " | " + " / ".join(JOIN) + " | duplicates | " + " / ".join(ATTRIBUTION) + " |",
        "|---|---|---|---|---|---|",
        _truth_row("**all**", t.overall),
        *[_truth_row(k, m) for k, m in sorted(t.strata.items())],
    ]  # fmt: skip


def _why(c: CellHistory) -> str:
    last = c.attempts[-1].reasons if c.attempts else []
    return f" ({', '.join(last)})" if last else ""


def report_md(r: IncompleteEvidenceReport) -> str:
    lines = [
        f"# Incomplete evidence: {r.subject_id}",
        "",
        "**Not publishable.** The preregistered matrix is not fully witnessed, so no "
        "figure about this subject's performance is derived from its evidence.",
        "",
        f"- protocol: `{r.protocol_id}` `{r.protocol_hash}`",
        f"- subject_config_hash: `{r.subject_config_hash}`",
        f"- eligibility proof: `{r.proof_hash}` (decision: ineligible)",
        f"- evidence_root_hash: `{r.evidence_root_hash}`",
        f"- witnessed cells: {r.witnessed_cells} of {r.registered_cells} registered",
        "",
        "## Reason codes",
        "",
        *[f"- `{c}`" for c in r.reason_codes],
        "",
        "## Strata",
        "",
        "| stratum | registered | witnessed | missing | blocked |",
        "|---|---|---|---|---|",
        *[
            f"| {k} | {v.registered_cells} | {v.witnessed_cells} | {v.missing_cells} | "
            f"{'yes' if v.blocked else 'no'} |"
            for k, v in sorted(r.strata.items())
        ],
        "",
        "## Cells not witnessed",
        "",
    ]
    bad = r.cells_not_witnessed
    lines += [f"- `{c.cell_id}` {c.stratum}: {c.state}{_why(c)}" for c in bad] or ["- none"]
    lines += ["", f"Every cell's attempt history: `{r.cell_history.file}`."]
    return "\n".join(lines) + "\n"
