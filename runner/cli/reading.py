"""The one entry of every command that reads a run directory or a bundle (issue 29).

`verify`, `evaluate`, `reproduce` (signed or not), `regrade`, `report`, `merge`, `compare` and
`registry add` call `read_run` before anything else: the argument must name a directory holding
a protocol.json (exit 2 otherwise), then the evaluator's lstat-only layout check (every entry's
type and stat size against its cap), the bounded scan of what the journals name, and the bounded
read of protocol.json run, before a signature is checked and before any result is parsed. Any
problem is an EvidenceError (exit 3) naming it. Nothing here writes, or follows a symlink inside
the directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.evaluator.core.bounded import check_path
from runner.evaluator.core.errors import InputError
from runner.evaluator.evidence.layout import open_run
from runner.evaluator.protocol.runfile import PROTOCOL_FILE, read_protocol


def read_run(path: Path, results: bool = True) -> None:
    """Refuse a run directory or bundle whose layout, sizes, references or protocol do not hold
    (module docstring). `results=False`: results/ is not looked at (`evaluate` replaces it)."""
    check_path(path)
    # lexists: a FIFO or symlink protocol.json is the layout check's to name (exit 3), not "absent"
    if not os.path.lexists(path / PROTOCOL_FILE):
        raise InputError(f"not a run directory or bundle (no {PROTOCOL_FILE})", file=str(path))
    open_run(path, results)
    read_protocol(path)


def read_card_bundles(cards: list[Path]) -> None:
    """`read_run` of the bundle of each RUN/results/<subject>/scorecard.json (`compare`,
    `registry add`); a loose card is left to the scorecard check to refuse."""
    from runner.evaluator.trust.bundle import bundle_of
    from runner.evaluator.trust.envelope import TrustError

    for card in cards:
        try:
            bundle, _ = bundle_of(card)
        except TrustError:
            continue
        read_run(bundle)
