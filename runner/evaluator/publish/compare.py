"""The comparison gate (DESIGN §5): a comparison exists only between publishable scorecards of
frozen protocols, under the [comparison] rules every scorecard carries (by default: the same
protocol and cell set, declared-distinct subjects, conforming environments). The gate applies the
strictest combination of the compared cards' rules, so no card is compared under weaker rules
than its own protocol's. Otherwise it is refused with reasons and no artifact is written.

A stratum in which any compared subject had a SCENARIO_MISMATCH is left out for every subject
and listed in `not_comparable_strata`; each subject's `overall` is then summed over the
comparable strata only (its wall-time median, which does not sum, is left out)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from runner.evaluator.core import reasons as R
from runner.evaluator.core.bounded import RESULT_FILE_CAP, read_bounded
from runner.evaluator.core.canonical import digest
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.types import Frozen
from runner.evaluator.environment.stage import check_pairs

from .load import load_result
from .models import (
    Completion,
    DuplicateEffects,
    Measures,
    PublishableScorecard,
    RecoveryOverhead,
    Truthfulness,
    absent_when_none,
)
from .paired import CellOutcomes, PairedComparison, cell_outcomes, compare_pair
from .render import ci
from .scoring import rate, ratio
from .stats import DEFAULT_ALPHA
from .truthfulness import sum_truth

COMPARISON_SCHEMA = "afb.comparison/2"


class ComparedSubject(Frozen):
    subject_id: str
    subject_config_hash: str
    scorecard_hash: str
    proof_hash: str
    overall: Measures
    strata: dict[str, Measures]
    truthfulness: Truthfulness | None = None  # issue 23: what each framework told its model

    @model_serializer(mode="wrap")
    def _without_truthfulness_when_unset(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        body: dict[str, Any] = handler(self)  # left out when unset: earlier comparisons' form
        if body.get("truthfulness") is None:
            body.pop("truthfulness", None)
        return body


class Comparison(Frozen):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_version: Literal["afb.comparison/2"] = Field(default="afb.comparison/2", alias="schema")
    protocol_id: str
    protocol_hash: str
    cell_set_hash: str
    environment_conformance: str | None
    not_comparable_strata: list[str]  # scenario_mismatch_stratum:<stratum>, left out for all
    subjects: list[ComparedSubject]  # sorted by subject id; no rank is implied
    # issue 25: the strictest alpha of the compared cards' [comparison] rules, and the paired
    # tests of every two subjects (publish/paired.py). Absent when the rows are not there.
    alpha: float | None = None
    paired: list[PairedComparison] | None = None
    comparison_hash: str

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return absent_when_none(handler(self), ("alpha", "paired"))


def compare(
    paths: list[Path],
    retired: Callable[[str], str | None] | None = None,
    check: Callable[[Path], list[str]] | None = None,
) -> tuple[Comparison | None, list[str]]:
    """Load result files and gate them; refuse anything that is not a publishable scorecard.

    `check` (runner/evaluator/trust/bundle.py, what `bench compare` passes) says why a scorecard
    is not accepted as evidence: not inside its bundle, unsigned or signed by an untrusted key,
    or not what its bundle's evidence derives. Each such reason refuses the comparison."""
    reasons: list[str] = []
    cards: list[tuple[Path, PublishableScorecard]] = []
    if len(paths) < 2:
        reasons.append(R.NEED_AT_LEAST_TWO_RESULTS)
    for p in paths:
        try:
            r = load_result(p)
        except (EvidenceError, ValidationError, ValueError) as exc:
            reasons.append(R.qualified(R.NOT_PUBLISHABLE, f"{p}: {str(exc).splitlines()[0]}"))
            continue
        if not isinstance(r, PublishableScorecard):
            why = f"{p}: incomplete evidence for subject {r.subject_id}"
            reasons.append(R.qualified(R.NOT_PUBLISHABLE, why))
            continue
        if check is not None:
            reasons += [R.qualified(R.NOT_PUBLISHABLE, why) for why in check(p)]
        state = retired(r.scorecard_hash()) if retired else None
        if state:  # R.SUPERSEDED or R.WITHDRAWN: the registry state is the code
            reasons.append(R.qualified(state, p))
        cards.append((p, r))
    reasons += gate([c for _, c in cards])
    env_proof = None
    if cards and not reasons and needs_conformance(c for _, c in cards):
        # the environment stage, run here: every compared run conforms with every other
        env_proof, env_reasons = check_pairs([(p, c.execution_environment_hash) for p, c in cards])
        reasons += env_reasons
    if reasons:
        return None, reasons
    return build([c for _, c in cards], env_proof, [_outcomes(p, c) for p, c in cards]), []


def _outcomes(path: Path, card: PublishableScorecard) -> CellOutcomes | None:
    """The card's cell rows beside it, only if they are the ones it binds (sha256, lines);
    otherwise no paired statistics, never a refusal: statistics do not gate."""
    try:
        data = read_bounded(path.parent / card.cell_scores.file, RESULT_FILE_CAP, evidence=True)
    except (OSError, EvidenceError):
        return None
    sha = "sha256:" + hashlib.sha256(data).hexdigest()
    if sha != card.cell_scores.sha256 or data.count(b"\n") != card.cell_scores.lines:
        return None
    return cell_outcomes(data)


def needs_conformance(cards: Iterable[PublishableScorecard]) -> bool:
    """[comparison].require_environment_conformance of any compared card."""
    return any(c.comparison_rules.require_environment_conformance for c in cards)


def gate(cards: list[PublishableScorecard]) -> list[str]:
    """The comparison rules that hold between scorecards themselves: each card's own
    [comparison] rules, combined strictly (a rule any card requires applies to all)."""
    reasons: list[str] = []
    if not cards:
        return reasons
    equal = {f for c in cards for f in c.comparison_rules.require_equal}
    if "protocol_hash" in equal and len({c.protocol_hash for c in cards}) > 1:
        reasons.append(R.PROTOCOL_HASH_DIFFERS)
    if "cell_set_hash" in equal and len({c.cell_set_hash for c in cards}) > 1:
        reasons.append(R.CELL_SET_DIFFERS)
    hashes = [c.subject_config_hash for c in cards]
    distinct = any(c.comparison_rules.require_distinct_subjects for c in cards)
    if distinct and len(set(hashes)) != len(hashes):
        reasons.append(R.SUBJECTS_NOT_DISTINCT)
    # No rule allows a draft (a scorecard cannot even be built from one; this is the backstop).
    if any(c.proof.protocol_status != "frozen" for c in cards):
        reasons.append(R.PROTOCOL_NOT_FROZEN)
    return reasons


def _summed(parts: list[Measures], fields: set[str]) -> Measures:
    """A group's measures from those of disjoint groups: every integer sums; a ratio is
    recomputed from its sums; the wall-time median does not sum and is left out (None)."""

    def total(get: Callable[[Measures], Any]) -> list[Any]:
        return [x for x in (get(m) for m in parts) if x is not None]

    out: dict[str, Any] = {}
    if "completion" in fields:
        cs: list[Completion] = total(lambda m: m.completion)
        done, n = sum(c.completed for c in cs), sum(c.cells for c in cs)
        out["completion"] = Completion(
            completed=done, cells=n, pre_trigger_failures=sum(c.pre_trigger_failures for c in cs),
            rate=rate(done, n),
        )  # fmt: skip
    if "duplicate_effects" in fields:
        ds: list[DuplicateEffects] = total(lambda m: m.duplicate_effects)
        exp, withd = sum(d.exposed_cells for d in ds), sum(d.cells_with_duplicates for d in ds)
        out["duplicate_effects"] = DuplicateEffects(
            exposed_cells=exp, duplicate_effects=sum(d.duplicate_effects for d in ds),
            cells_with_duplicates=withd, share_without_duplicates=rate(exp - withd, exp),
            duplicate_rate=rate(withd, exp),
        )  # fmt: skip
    if "recovery_overhead" in fields:
        ovs: list[RecoveryOverhead] = total(lambda m: m.recovery_overhead)
        pairs, extra = sum(o.pairs for o in ovs), sum(o.extra_tool_calls_total or 0 for o in ovs)
        out["recovery_overhead"] = (
            RecoveryOverhead(
                pairs=pairs,
                missing_baseline=sum(o.missing_baseline for o in ovs),
                unrecovered=sum(o.unrecovered for o in ovs),
                extra_tool_calls_total=extra if pairs else None,
                extra_tool_calls_mean=ratio(extra, pairs),
                wall_time_ratio_median=None,
            )
            if ovs
            else None
        )
    return Measures(**out)


def _truth_compared(t: Truthfulness | None, blocked: list[str]) -> Truthfulness | None:
    """The comparable strata's truthfulness; overall summed over them when one is left out."""
    if t is None or not blocked:
        return t
    strata = {k: m for k, m in t.strata.items() if k not in blocked}
    return t.model_copy(update={"strata": strata, "overall": sum_truth(list(strata.values()))})


def build(
    cards: list[PublishableScorecard],
    env_proof: str | None,
    outcomes: list[CellOutcomes | None] | None = None,
) -> Comparison:
    """`outcomes`: each card's cell outcomes (paired.cell_outcomes), in `cards` order; the
    paired tests are made only when every card has them."""
    first = cards[0]
    blocked = sorted({s for c in cards for s in c.scenario_mismatch_strata})

    def compared(c: PublishableScorecard) -> ComparedSubject:
        strata = {k: m for k, m in c.strata.items() if k not in blocked}
        return ComparedSubject(
            subject_id=c.subject_id,
            subject_config_hash=c.subject_config_hash,
            scorecard_hash=c.scorecard_hash(),
            proof_hash=c.proof_hash,
            overall=_summed(list(strata.values()), c.overall.model_fields_set)
            if blocked
            else c.overall,
            strata=strata,
            truthfulness=_truth_compared(c.truthfulness, blocked),
        )

    order = sorted(
        range(len(cards)), key=lambda i: (cards[i].subject_id, cards[i].subject_config_hash)
    )
    subjects = [compared(cards[i]) for i in order]
    alpha = min(c.comparison_rules.alpha or DEFAULT_ALPHA for c in cards)
    extra: dict[str, Any] = {}
    if outcomes is not None and all(o is not None for o in outcomes):
        got = [(cards[i].subject_id, o) for i in order if (o := outcomes[i]) is not None]
        extra["alpha"] = alpha
        extra["paired"] = [
            compare_pair(a, b, blocked, alpha, first.protocol_hash).model_dump(mode="json")
            for n, a in enumerate(got)
            for b in got[n + 1 :]
        ]
    body = {
        "schema": COMPARISON_SCHEMA,
        "protocol_id": first.protocol_id,
        "protocol_hash": first.protocol_hash,
        "cell_set_hash": first.cell_set_hash,
        "environment_conformance": env_proof,
        "not_comparable_strata": [R.qualified(R.SCENARIO_MISMATCH_STRATUM, s) for s in blocked],
        "subjects": [s.model_dump(mode="json") for s in subjects],
        **extra,
    }
    return Comparison.model_validate({**body, "comparison_hash": digest(body)})


def comparison_md(c: Comparison) -> str:
    def v(r: Any) -> str:
        return "n/a" if r is None else f"{r.value}{ci(r.interval)}"

    lines = [
        f"# Comparison on `{c.protocol_id}` `{c.protocol_hash}`",
        "",
        f"- cell set: `{c.cell_set_hash}`",
        f"- environment conformance: `{c.environment_conformance or 'not required'}`",
    ]
    if c.not_comparable_strata:
        lines.append(
            "- left out (overall sums the other strata): "
            + ", ".join(f"`{s}`" for s in c.not_comparable_strata)
        )
    lines += [
        "",
        "| subject | completion | duplicate effects | exposed cells without duplicates "
        "| extra tool calls (mean) | wall-time ratio (median) |",
        "|---|---|---|---|---|---|",
    ]
    for s in c.subjects:
        m = s.overall
        d, o = m.duplicate_effects, m.recovery_overhead
        wall = (
            f"{o.wall_time_ratio_median}{ci(o.wall_time_ratio_median_interval)}"
            if o and o.wall_time_ratio_median
            else "n/a"
        )
        lines.append(
            f"| {s.subject_id} | {v(m.completion.rate) if m.completion else '-'} | "
            f"{d.duplicate_effects if d else '-'} | "
            f"{v(d.share_without_duplicates) if d else '-'} | "
            f"{v(o.extra_tool_calls_mean) if o else '-'} | {wall} |"
        )
    truths = [(s.subject_id, s.truthfulness) for s in c.subjects if s.truthfulness]
    if truths:
        lines += [
            "",
            "What each framework told its model about an exposed irreversible call, and who "
            "duplicated (docs/SUBJECTS.md):",
            "",
            "| subject | model policy | truthful | misleading | silent | duplicates "
            "| model_requested | framework_retried | restart_replayed |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for sid, t in truths:
            tm = t.overall
            lines.append(
                f"| {sid} | {t.model_policy or '-'} | {v(tm.truthful)} | {tm.join['misleading']} | "
                f"{tm.join['silent']} | {tm.duplicate_effects} | "
                f"{tm.attribution['model_requested']} | {tm.attribution['framework_retried']} | "
                f"{tm.attribution['restart_replayed']} |"
            )
    lines.append("")
    lines.append(
        "Intervals are 95 % (exact Clopper-Pearson for rates). The table alone ranks nothing: "
        "a difference is stated only where its paired test below shows it."
    )
    lines += _paired_md(c)
    return "\n".join(lines) + "\n"


_DECISION = {
    "first_higher": "{a} higher",
    "second_higher": "{b} higher",
    "no_difference_shown": "no difference shown",
}


def _paired_md(c: Comparison) -> list[str]:
    if c.paired is None:
        return [
            "",
            "No paired tests: a compared scorecard's cell rows are missing or predate them "
            "(`bench regrade` brings them).",
        ]
    out: list[str] = []
    for pc in c.paired:
        out += [
            "",
            f"## Paired: {pc.first} vs {pc.second} (alpha {pc.alpha})",
            "",
            "Pairs share task, fault, seed and replicate. Headline: the task-clustered sign-flip "
            "test (strata: Holm-adjusted within a measure); McNemar on the discordant pairs; "
            "difference = first - second with its task-clustered bootstrap interval (for "
            "extra_tool_calls: the mean difference in extra tool calls of pairs recovered in "
            "both; higher there means more calls).",
            "",
            "| measure | stratum | pairs | tasks | both / first only / second only / neither "
            "| McNemar p | difference | sign-flip p | Holm p | at alpha |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for t in pc.tests:
            m, sf = t.mcnemar, t.sign_flip
            table = (
                "-" if m is None else f"{m.both} / {m.first_only} / {m.second_only} / {m.neither}"
            )
            mcnemar_p = "-" if m is None else f"{m.p_value:.4g}"
            diff = "n/a" if t.difference is None else f"{t.difference:+.3f}"
            iv = t.difference_interval
            if iv is not None:
                diff += f" [{iv.low:+.3f}, {iv.high:+.3f}]"
            how = "exact" if sf.exact else f"MC, se {sf.monte_carlo_standard_error}"
            holm_p = "-" if t.holm_p_value is None else f"{t.holm_p_value:.4g}"
            said = _DECISION[t.decision].format(a=pc.first, b=pc.second)
            out.append(
                f"| {t.measure} | {t.stratum} | {t.pairs} | {t.tasks} | "
                f"{table} | {mcnemar_p} | {diff} | {sf.p_value:.4g} ({how}) | {holm_p} | {said} |"
            )
    return out
