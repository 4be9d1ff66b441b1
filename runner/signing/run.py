"""`bench keys sign RUN_DIR`: sign an evaluated run once it holds, with the evaluator that judged
it. This checkout's evaluator re-derives it (runner/verification.py); a run judged by another
evaluator is reproduced by that one, found in git history (runner/history.py, as `bench reproduce
--evaluator-from-history`). Nothing is signed that does not hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.results import judging_evaluator
from runner.signing import keys as signing
from runner.signing.sign import key_outside, sign_results


@dataclass(frozen=True)
class SignedRun:
    problem: str | None  # why it was not signed (None: signed)
    reproduced_by: str | None  # another evaluator that reproduced it: "<digest> (commit <12>)"
    keyid: str
    files: int


def _verified(run_dir: Path) -> str | None:
    from runner.verification import evidence_problems

    problems = evidence_problems(run_dir)
    return f"the run does not verify: {problems[0]}" if problems else None


def _reproduced(run_dir: Path, theirs: str) -> tuple[str | None, str | None]:
    from runner.history import reproduce_with_own_evaluator, reproduced

    ran = reproduce_with_own_evaluator(None, run_dir, theirs)
    if reproduced(ran):
        return None, f"{theirs} (commit {ran.found.commit[:12]})"
    last = (ran.stderr.strip().splitlines() or ran.stdout.strip().splitlines() or ["?"])[-1]
    return f"its own evaluator {theirs} does not reproduce it (exit {ran.returncode}): {last}", None


def sign_run(run_dir: Path, key_dir: Path | None = None) -> SignedRun:
    """Sign `run_dir` (already through the CLI's reading entry) with the key in `key_dir`: its
    files, evidence root and scorecards, once it verifies or its own evaluator reproduces it."""
    key_outside(run_dir, signing.key_dir(key_dir))
    signer = signing.load_signer(key_dir)
    keyid = signer.public_key.keyid
    theirs = judging_evaluator(run_dir)
    if theirs == evaluator_digest():
        problem, by = _verified(run_dir), None
    else:
        problem, by = _reproduced(run_dir, theirs)
    if problem is not None:
        return SignedRun(problem, by, keyid, 0)
    return SignedRun(None, by, keyid, len(sign_results(run_dir, signer)))
