"""A scorecard is accepted only with its bundle, and only as what that bundle's evidence makes.

`ScorecardCheck` is what `bench compare` and `bench registry add` ask of each scorecard:

1. it lies in its bundle, at RUN/results/<subject>/scorecard.json (a loose copy has no evidence);
2. unless unsigned runs are explicitly allowed: the run's signature verifies under a trusted key
   and every file of the bundle is the one signed (run.check_run), and the scorecard's own signed
   statement names these bytes and the run's evidence root (run.check_scorecard);
3. when the bundle was judged by this evaluator: the bundle's evidence, evaluated again here,
   derives exactly these bytes (a hand-edited measure, a resealed proof, a nudged or nulled field
   differs). A bundle of another evaluator cannot be re-derived here: its signature then stands
   alone, and an unsigned one is refused.

Each bundle is checked and derived once per `ScorecardCheck`, however many cards it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from securesystemslib.signer import Key  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core.bounded import RESULT_FILE_CAP, read_bounded
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.evidence.layout import open_run
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.publish.reproduce import describe
from runner.evaluator.publish.results import RESULTS, derive, judging_evaluator

from .envelope import TrustError
from .run import RunPredicate, check_run, check_scorecard

SCORECARD = "scorecard.json"


def bundle_of(card: Path) -> tuple[Path, str]:
    """(bundle, subject) of RUN/results/<subject>/scorecard.json; TrustError for a loose card."""
    card = card.absolute()
    bundle = card.parent.parent.parent
    if (
        card.name != SCORECARD
        or card.parent.parent.name != RESULTS
        or not (bundle / "protocol.json").is_file()
    ):
        raise TrustError(
            f"{card}: a scorecard is accepted only inside its bundle, as "
            f"RUN_DIR/{RESULTS}/<subject>/{SCORECARD} (a loose copy carries no evidence)"
        )
    return bundle, card.parent.name


class ScorecardCheck:
    def __init__(
        self,
        trusted: Mapping[str, Key],
        evaluator_digest: str,
        *,
        require_signature: bool = True,
    ) -> None:
        self.trusted = trusted
        self.evaluator_digest = evaluator_digest
        self.require_signature = require_signature
        self._runs: dict[Path, RunPredicate | TrustError] = {}
        self._layouts: dict[Path, str | None] = {}
        self._derived: dict[Path, dict[str, bytes] | str] = {}

    def __call__(self, card: Path) -> list[str]:
        """Why this scorecard is refused (empty: accepted)."""
        try:
            bundle, subject = bundle_of(card)
            self._readable(bundle)
            if self.require_signature:
                check_scorecard(bundle, subject, self.trusted, self._run(bundle))
        except (TrustError, InputError) as exc:
            return [str(exc)]
        return self._rederived(card, bundle, subject)

    def _readable(self, bundle: Path) -> None:
        """The bundle's layout, sizes, references and protocol hold (layout.open_run, the entry
        of every reading command): checked before its signature or any of its files is read."""
        if bundle not in self._layouts:
            try:
                open_run(bundle)
                read_protocol(bundle)
                self._layouts[bundle] = None
            except EvidenceError as exc:
                self._layouts[bundle] = f"{bundle}: {exc}"
        problem = self._layouts[bundle]
        if problem is not None:
            raise TrustError(problem)

    def _run(self, bundle: Path) -> RunPredicate:
        if bundle not in self._runs:
            try:
                self._runs[bundle] = check_run(bundle, self.trusted)
            except TrustError as exc:
                self._runs[bundle] = exc
        got = self._runs[bundle]
        if isinstance(got, TrustError):
            raise got
        return got

    def _rederived(self, card: Path, bundle: Path, subject: str) -> list[str]:
        try:
            theirs = judging_evaluator(bundle)
        except (EvidenceError, InputError) as exc:
            return [f"{bundle}: {exc}"]
        if theirs != self.evaluator_digest:
            if self.require_signature:
                return []  # signed, and not re-derivable by this evaluator: the signature stands
            return [f"{card}: unsigned, and judged by evaluator {theirs}, not this one: it "
                    "cannot be re-derived here"]  # fmt: skip
        if bundle not in self._derived:
            try:
                self._derived[bundle] = derive(bundle, self.evaluator_digest)[2]
            except (EvidenceError, InputError) as exc:
                self._derived[bundle] = f"{bundle}: its evidence does not evaluate: {exc}"
        files = self._derived[bundle]
        if isinstance(files, str):
            return [files]
        rel = f"{RESULTS}/{subject}/{SCORECARD}"
        try:
            data = read_bounded(card, RESULT_FILE_CAP, evidence=True)
        except EvidenceError as exc:
            return [str(exc)]
        if rel not in files:
            return [f"{card}: the bundle's evidence derives no scorecard for {subject!r} "
                    "(not publishable from this evidence)"]  # fmt: skip
        if files[rel] != data:
            return [f"{card}: not what the bundle's evidence derives: "
                    f"{describe(rel, data, files[rel])}"]  # fmt: skip
        return []
