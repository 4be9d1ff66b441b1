"""The comparison gate (DESIGN §5): a comparison exists only between publishable scorecards on
the same frozen protocol and cell set, for declared-distinct subjects, in conforming
environments. Otherwise it is refused with reasons and no artifact is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.evaluator.core.canonical import digest
from runner.evaluator.core.errors import EvidenceError

from .publication import Measures, PublishableScorecard

COMPARISON_SCHEMA = "afb.comparison/1"
EnvPairCheck = Callable[[list[tuple[Path, PublishableScorecard]]], tuple[str | None, list[str]]]


class ComparedSubject(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    subject_id: str
    subject_config_hash: str
    scorecard_hash: str
    proof_hash: str
    overall: Measures
    strata: dict[str, Measures]


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_version: Literal["afb.comparison/1"] = Field(default="afb.comparison/1", alias="schema")
    protocol_id: str
    protocol_hash: str
    cell_set_hash: str
    environment_conformance: str | None
    subjects: list[ComparedSubject]  # sorted by subject id; no rank is implied
    comparison_hash: str


def compare(
    paths: list[Path],
    env_check: EnvPairCheck | None = None,
    retired: Callable[[str], str | None] | None = None,
) -> tuple[Comparison | None, list[str]]:
    """Load result files and gate them; refuse anything that is not a publishable scorecard."""
    from .results import load_result  # results imports this module

    reasons: list[str] = []
    cards: list[tuple[Path, PublishableScorecard]] = []
    if len(paths) < 2:
        reasons.append("need_at_least_two_results")
    for p in paths:
        try:
            r = load_result(p)
        except (EvidenceError, ValidationError, ValueError) as exc:
            reasons.append(f"not_publishable:{p}: {str(exc).splitlines()[0]}")
            continue
        if not isinstance(r, PublishableScorecard):
            reasons.append(f"not_publishable:{p}: incomplete evidence for subject {r.subject_id}")
            continue
        state = retired(r.scorecard_hash()) if retired else None
        if state:
            reasons.append(f"{state}:{p}")
        cards.append((p, r))
    reasons += gate([c for _, c in cards])
    env_proof = None
    if cards and env_check is not None and not reasons:
        env_proof, env_reasons = env_check(cards)
        reasons += env_reasons
    if reasons:
        return None, reasons
    return build([c for _, c in cards], env_proof), []


def gate(cards: list[PublishableScorecard]) -> list[str]:
    """The comparison rules that hold between scorecards themselves."""
    reasons: list[str] = []
    if not cards:
        return reasons
    if len({c.protocol_hash for c in cards}) > 1:
        reasons.append("protocol_hash_differs")
    if len({c.cell_set_hash for c in cards}) > 1:
        reasons.append("cell_set_differs")
    hashes = [c.subject_config_hash for c in cards]
    if len(set(hashes)) != len(hashes):
        reasons.append("subjects_not_distinct")
    if any(c.proof.protocol_status != "frozen" for c in cards):
        reasons.append("protocol_not_frozen")
    return reasons


def build(cards: list[PublishableScorecard], env_proof: str | None) -> Comparison:
    first = cards[0]
    subjects = [
        ComparedSubject(
            subject_id=c.subject_id,
            subject_config_hash=c.subject_config_hash,
            scorecard_hash=c.scorecard_hash(),
            proof_hash=c.proof_hash,
            overall=c.overall,
            strata=c.strata,
        )
        for c in sorted(cards, key=lambda c: (c.subject_id, c.subject_config_hash))
    ]
    body = {
        "schema": COMPARISON_SCHEMA,
        "protocol_id": first.protocol_id,
        "protocol_hash": first.protocol_hash,
        "cell_set_hash": first.cell_set_hash,
        "environment_conformance": env_proof,
        "subjects": [s.model_dump(mode="json") for s in subjects],
    }
    return Comparison.model_validate({**body, "comparison_hash": digest(body)})


def comparison_md(c: Comparison) -> str:
    lines = [
        f"# Comparison on `{c.protocol_id}` `{c.protocol_hash}`",
        "",
        f"- cell set: `{c.cell_set_hash}`",
        f"- environment conformance: `{c.environment_conformance or 'not required'}`",
        "",
        "| subject | completion | duplicate effects | cells without duplicates "
        "| extra tool calls (mean) | wall-time ratio (median) |",
        "|---|---|---|---|---|---|",
    ]
    for s in c.subjects:
        o, m = s.overall.recovery_overhead, s.overall
        comp = m.completion.rate
        share = m.duplicate_effects.share_without_duplicates
        lines.append(
            f"| {s.subject_id} | {comp.value if comp else 'n/a'} | "
            f"{m.duplicate_effects.duplicate_effects} | {share.value if share else 'n/a'} | "
            f"{o.extra_tool_calls_mean.value if o and o.extra_tool_calls_mean else 'n/a'} | "
            f"{o.wall_time_ratio_median if o and o.wall_time_ratio_median else 'n/a'} |"
        )
    return "\n".join(lines) + "\n"
