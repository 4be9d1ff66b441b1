"""What `bench verify`, `bench compare`, `bench registry add` and `bench keys sign` check of a run
directory (after the CLI's one reading entry, `runner/cli/reading.py`): its evidence re-derived
by this evaluator, its derived views re-rendered, its signatures against the trusted keys. The
commands only display the outcome."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.results import verify as verify_run
from runner.evaluator.trust.bundle import ScorecardCheck
from runner.evaluator.trust.keys import trusted_keys


def signature_problem(bundle: Path, trusted_dir: Path | None) -> str | None:
    """Why the bundle's signatures do not hold, against the trusted keys (None: they hold)."""
    from runner.evaluator.trust.run import signature_problem as problem

    return problem(bundle, trusted_keys(trusted_dir))


def unsigned_run(run_dir: Path) -> bool:
    """A run that was never signed (no run envelope at all), as opposed to a signature that is
    wrong: the first is a local run's normal state, and is told how to sign."""
    from runner.evaluator.trust.run import RUN_ENVELOPE

    return not os.path.lexists(run_dir / RUN_ENVELOPE)


def evidence_problems(run_dir: Path) -> list[str]:
    """Every hash, journal chain, blob address and result re-derived by this evaluator, then
    (only when those hold: they are rendered from verified results) the derived views."""
    problems = verify_run(run_dir, evaluator_digest())
    if not problems:
        from runner.report.check import view_problems

        problems = view_problems(run_dir)
    return problems


@dataclass(frozen=True)
class Verification:
    problems: list[str]  # the evidence's own first mismatch first, a signature's after it
    never_signed: bool  # nothing else wrong, but no signature at all: told how to sign
    signature_checked: bool


def verify(run_dir: Path, trusted_dir: Path | None, *, allow_unsigned: bool) -> Verification:
    """`bench verify`: the evidence, the views, then (unless `allow_unsigned`) the signatures."""
    problems = evidence_problems(run_dir)
    if allow_unsigned:
        return Verification(problems, never_signed=False, signature_checked=False)
    if not problems and unsigned_run(run_dir):
        return Verification([], never_signed=True, signature_checked=True)
    if (unsigned := signature_problem(run_dir, trusted_dir)) is not None:
        problems.append(f"signature: {unsigned}")  # after the evidence's own first mismatch
    return Verification(problems, never_signed=False, signature_checked=True)


def scorecard_check(trusted_dir: Path | None, *, require_signature: bool = True) -> ScorecardCheck:
    """A scorecard believed only inside its bundle, signed by a trusted key (unless not
    required) and re-derived from the bundle's evidence: what compare and registry add hold."""
    return ScorecardCheck(
        trusted_keys(trusted_dir), evaluator_digest(), require_signature=require_signature
    )
