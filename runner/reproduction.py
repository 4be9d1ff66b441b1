"""`bench reproduce BUNDLE`: re-derive a published result bit for bit. With this checkout's
evaluator when the bundle names it (runner/verification.py's checks, byte-equal results and
views); else, when asked, with the bundle's own evaluator found in git history
(runner/history.py). The signatures are always this checkout's to check, against its trusted
keys. The command displays the outcome; `--rerun` is runner/orchestrate.rerun."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.reproduce import reproduce as reproduce_bundle
from runner.evaluator.publish.results import judging_evaluator
from runner.history import HistoricRun
from runner.verification import signature_problem


@dataclass(frozen=True)
class Reproduction:
    theirs: str  # the evaluator that made the bundle
    ours: str  # this checkout's
    signature: str | None  # why its signatures do not hold (None: they hold, or not checked)
    # this checkout's evaluator: what did not re-derive (the signature's problem first)
    problems: list[str]
    result_files: int  # result files re-derived byte for byte (the views apart)
    views: tuple[str, ...]  # derived views present, re-rendered byte for byte
    # another evaluator, asked for: its run from history, or why it could not run
    historic: HistoricRun | None = None
    historic_error: InputError | None = None

    @property
    def same_evaluator(self) -> bool:
        return self.theirs == self.ours

    @property
    def historic_reproduced(self) -> bool:
        """Did the bundle's own evaluator say REPRODUCED (exit 0)?"""
        from runner.history import reproduced

        return self.historic is not None and reproduced(self.historic)


def reproduce(
    bundle: Path, trusted_dir: Path | None, *, allow_unsigned: bool, from_history: bool
) -> Reproduction:
    """Reproduce `bundle` (already through the CLI's reading entry). `from_history`: when
    another evaluator made it, run that one (else only say so)."""
    unsigned = None if allow_unsigned else signature_problem(bundle, trusted_dir)
    theirs, ours = judging_evaluator(bundle), evaluator_digest()
    if theirs != ours:
        if not from_history:
            return Reproduction(theirs, ours, unsigned, [], 0, ())
        from runner.history import reproduce_with_own_evaluator

        try:  # the signatures are checked here, against this checkout's trusted keys
            ran = reproduce_with_own_evaluator(None, bundle, theirs)
        except InputError as exc:  # said after what was checked before it
            return Reproduction(theirs, ours, unsigned, [], 0, (), historic_error=exc)
        return Reproduction(theirs, ours, unsigned, [], 0, (), historic=ran)
    problems = reproduce_bundle(bundle, evaluator_digest())
    if not problems:  # the views are rendered from reproduced results only
        from runner.report.check import view_problems

        problems = view_problems(bundle)
    if unsigned is not None:
        problems.insert(0, f"signature: {unsigned}")
    if problems:
        return Reproduction(theirs, ours, unsigned, problems, 0, ())
    from runner.evaluator.evidence.layout import scan_layout
    from runner.evaluator.publish.results import DERIVED_VIEWS
    from runner.report.check import VIEWS

    listed = scan_layout(bundle).results  # lstat only, like every read above
    n = sum(1 for rel in listed if rel not in DERIVED_VIEWS)
    views = tuple(v for v in VIEWS if f"results/{v}" in listed)
    return Reproduction(theirs, ours, unsigned, [], n, views)
