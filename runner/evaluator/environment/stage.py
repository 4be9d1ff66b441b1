"""The environment stage: a run's conformance under its spec's factors (DESIGN §7).

Run by the evaluator itself, never handed in: `verdict/eligibility.py` checks the run it judges
and `publish/` writes the proof it concluded, so no caller can evaluate a run with environment
factors without their check. Reads only evidence (the environment artifact is a blob named by
the run's `environment` journal record), so results stay re-derivable from evidence alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from runner.evaluator.core import reasons as R
from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.runfile import RunProtocol, read_protocol

from .artifact import ExecutionEnvironment, load_environment
from .conformance import check_environments, check_run


class EnvironmentCheck(NamedTuple):
    """What the environment conformance check concluded about a run."""

    proof_hash: str | None
    execution_environment_hash: str | None
    reasons: list[str]
    proof: dict[str, Any] | None = None  # the conformance proof document, written with results


NO_ENVIRONMENT = EnvironmentCheck(None, None, [])


def _artifact(evidence: LoadedEvidence, address: str) -> ExecutionEnvironment:
    if evidence.blobs is None:  # in-memory evidence without its blobs: nothing to check against
        raise EvidenceError(f"environment artifact {address}: no blobs to read it from")
    try:
        return load_environment(parse_json(evidence.blobs(address)))
    except ValueError as exc:
        raise EvidenceError(f"environment artifact {address} is not valid: {exc}") from exc


def check_environment(rp: RunProtocol, evidence: LoadedEvidence) -> EnvironmentCheck:
    """The run's environment records against its spec's factors (none declared: no check)."""
    spec = rp.spec()
    if not spec.factors:
        return NO_ENVIRONMENT
    if not evidence.environment:
        required = any(f.required for f in spec.factors)
        return EnvironmentCheck(None, None, [R.ENVIRONMENT_NOT_RECORDED] if required else [])
    envs: list[ExecutionEnvironment] = []
    for rec in evidence.environment:
        try:
            env = _artifact(evidence, rec.artifact)
        except EvidenceError:
            return EnvironmentCheck(
                None, rec.execution_environment_hash, [R.ENVIRONMENT_ARTIFACT_INVALID]
            )
        if env.execution_environment_hash != rec.execution_environment_hash:
            return EnvironmentCheck(
                None, rec.execution_environment_hash, [R.ENVIRONMENT_ARTIFACT_MISMATCH]
            )
        if env.execution_environment_hash not in {e.execution_environment_hash for e in envs}:
            envs.append(env)
    # One artifact per invocation (a resumed run records another): each must conform under the
    # policy, and all of them with each other, or the run's cells are not comparable at all.
    first = min(envs, key=lambda e: e.execution_environment_hash)
    proof = (
        check_run(first, spec.factors, spec.sources)
        if len(envs) == 1
        else (check_environments(envs, spec.factors, spec.sources, purpose="overhead_pair"))
    )
    reasons = (
        [R.qualified(R.ENVIRONMENT, c) for c in proof.reason_codes] if not proof.conform else []
    )
    return EnvironmentCheck(
        proof.proof_hash, first.execution_environment_hash, reasons, proof.to_json()
    )


def _run_of(scorecard: Path) -> Path:
    """A scorecard's run directory."""
    # RUN_DIR/results/<subject>/scorecard.json
    return scorecard.resolve().parents[2]


def check_pairs(cards: Sequence[tuple[Path, str | None]]) -> tuple[str | None, list[str]]:
    """Compared scorecards, each as (its path, its execution_environment_hash): every one's
    environment must conform with every other's under the policy. (proof hash, reasons)."""
    envs: list[ExecutionEnvironment] = []
    factors = None
    for path, env_hash in cards:
        if env_hash is None:
            continue
        run = _run_of(path)
        try:
            rp = read_protocol(run)
            ev = LoadedEvidence.from_store(EvidenceStore(run, create=False))
        except (EvidenceError, OSError) as exc:
            return (None, [R.qualified(R.ENVIRONMENT_UNREADABLE, f"{path}: {exc}")])
        match = [r for r in ev.environment if r.execution_environment_hash == env_hash]
        if not match:
            return (None, [R.qualified(R.ENVIRONMENT_MISSING, path)])
        envs.append(_artifact(ev, match[0].artifact))
        spec = rp.spec()
        factors = (spec.factors, spec.sources)
    if factors is None:
        return (None, [])
    if len(envs) != len(cards):
        return (None, [R.ENVIRONMENT_MISSING_FOR_SOME_RESULTS])
    proof = check_environments(envs, *factors)
    if not proof.conform:
        return (None, [R.qualified(R.ENVIRONMENT, c) for c in proof.reason_codes])
    return (proof.proof_hash, [])
