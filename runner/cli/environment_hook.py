"""Environment conformance wired into evaluation and comparison (DESIGN §7).

Kept out of runner/evaluator/results.py so that module stays independent of how environment
artifacts are checked; both hooks are pure functions of files inside the run directories.
"""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.eligibility import EnvironmentCheck, LoadedEvidence
from runner.evaluator.journal import EvidenceStore
from runner.evaluator.publication import PublishableScorecard
from runner.evaluator.runfile import RunProtocol


def environment_hook(
    rp: RunProtocol, evidence: LoadedEvidence, store: EvidenceStore
) -> EnvironmentCheck:
    spec = rp.spec()
    required = [f for f in spec.factors if f.required]
    if not evidence.environment:
        return (None, None, ["environment_not_recorded"] if required else [])
    if len(evidence.environment) > 1:
        return (None, None, ["environment_recorded_twice"])
    rec = evidence.environment[0]
    return (None, rec.execution_environment_hash, [])


def environment_pair_check(
    cards: list[tuple[Path, PublishableScorecard]],
) -> tuple[str | None, list[str]]:
    return (None, [])
