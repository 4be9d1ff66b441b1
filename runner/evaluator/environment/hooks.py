"""Environment conformance wired into evaluation and comparison (DESIGN §7).

Evaluator code (it decides eligibility), so it is covered by evaluator_digest.

Both hooks read only files inside run directories (the environment artifact is a blob named by
the run's `environment` journal record), so results stay re-derivable from evidence alone.
"""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.runfile import RunProtocol, read_protocol
from runner.evaluator.publish.models import PublishableScorecard
from runner.evaluator.verdict import reasons as R
from runner.evaluator.verdict.eligibility import EnvironmentCheck

from .artifact import ExecutionEnvironment, load_environment
from .conformance import check_environments, check_run


def _artifact(store: EvidenceStore, address: str) -> ExecutionEnvironment:
    try:
        return load_environment(parse_json(store.get_blob(address)))
    except ValueError as exc:
        raise EvidenceError(f"environment artifact {address} is not valid: {exc}") from exc


def environment_hook(
    rp: RunProtocol, evidence: LoadedEvidence, store: EvidenceStore
) -> EnvironmentCheck:
    spec = rp.spec()
    if not spec.factors:
        return EnvironmentCheck(None, None, [])
    if not evidence.environment:
        required = any(f.required for f in spec.factors)
        return EnvironmentCheck(None, None, [R.ENVIRONMENT_NOT_RECORDED] if required else [])
    envs: list[ExecutionEnvironment] = []
    for rec in evidence.environment:
        try:
            env = _artifact(store, rec.artifact)
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


def environment_pair_check(
    cards: list[tuple[Path, PublishableScorecard]],
) -> tuple[str | None, list[str]]:
    """Every compared scorecard's environment must conform with every other's under the policy."""
    envs: list[ExecutionEnvironment] = []
    factors = None
    for path, card in cards:
        if card.execution_environment_hash is None:
            continue
        run = _run_of(path)
        try:
            rp = read_protocol(run)
            store = EvidenceStore(run, create=False)
            ev = LoadedEvidence.from_store(store)
        except (EvidenceError, OSError) as exc:
            return (None, [R.qualified(R.ENVIRONMENT_UNREADABLE, f"{path}: {exc}")])
        match = [
            r
            for r in ev.environment
            if r.execution_environment_hash == card.execution_environment_hash
        ]
        if not match:
            return (None, [R.qualified(R.ENVIRONMENT_MISSING, path)])
        envs.append(_artifact(store, match[0].artifact))
        spec = rp.spec()
        factors = (spec.factors, spec.sources)
    if factors is None or not spec_requires(cards):
        return (None, [])
    if len(envs) != len(cards):
        return (None, [R.ENVIRONMENT_MISSING_FOR_SOME_RESULTS])
    proof = check_environments(envs, *factors)
    if not proof.conform:
        return (None, [R.qualified(R.ENVIRONMENT, c) for c in proof.reason_codes])
    return (proof.proof_hash, [])


def spec_requires(cards: list[tuple[Path, PublishableScorecard]]) -> bool:
    return any(c.execution_environment_hash is not None for _, c in cards)
