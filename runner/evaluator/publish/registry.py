"""The append-only result registry: published, superseded and withdrawn entries in a hash chain.

Nothing is edited in place: a wrong result is marked superseded (with the adjudication and the
replacement protocol hash) or withdrawn; a regraded scorecard links `derived_from` (its own
field, or --derived-from), which must name a scorecard already in the registry. A scorecard of a
draft protocol is never registered, and the same scorecard is registered once (a second `add`
is refused, naming it).

Writers are serialised by an exclusive `flock` on a sidecar lock file: each reads the state,
decides and appends under it (O_APPEND, one write per line, fsync), so concurrent writers never
interleave, break the chain or register a card twice. The caller's `anchor` (a check of the
signed head, runner/evaluator/trust/head.py) runs before every read, under a shared lock, and
its `sealer` (re-signing that head) after every append, under the exclusive lock; `check`
(runner/evaluator/trust/bundle.py) decides whether a scorecard is accepted at all.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from runner.evaluator.core import reasons as R
from runner.evaluator.core.appendlog import append_record, read_chain
from runner.evaluator.core.canonical import digest, is_digest
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.core.types import Frozen

from .load import load_result
from .models import PublishableScorecard

State = Literal["published", "superseded", "withdrawn"]


class RegistryEntry(Frozen):
    type: State
    scorecard_hash: str
    protocol_hash: str
    subject_id: str
    subject_config_hash: str
    location: str | None = None
    derived_from: str | None = None
    adjudication: str | None = None
    replacement_protocol_hash: str | None = None
    replacement_scorecard_hash: str | None = None
    recorded_at: str
    previous: str | None
    record_hash: str = ""  # digest of the entry without this field: the last line is sealed too

    def body(self) -> dict[str, object]:
        return self.model_dump(mode="json", exclude={"record_hash"})

    def sealed(self) -> RegistryEntry:
        return self.model_copy(update={"record_hash": digest(self.body())})


def _edited(e: RegistryEntry, line: bytes, before: list[RegistryEntry]) -> str | None:
    return "the entry was edited (record_hash)" if e.record_hash != digest(e.body()) else None


Anchor = Callable[[Path], object]  # raises (TrustError) when the log is not its signed head
Sealer = Callable[[Path], object]  # re-signs the log's head after an append
Check = Callable[[Path], list[str]]  # why a scorecard is refused (empty: accepted)


class Registry:
    def __init__(
        self, path: Path, *, anchor: Anchor | None = None, sealer: Sealer | None = None
    ) -> None:
        self.path = path
        self.anchor = anchor
        self.sealer = sealer
        self._writing = False  # this object holds the exclusive lock

    def entries(self) -> list[RegistryEntry]:
        if self._writing or self.anchor is None:
            return self._entries()
        with self._lock(fcntl.LOCK_SH):  # a writer appends and re-signs under LOCK_EX
            return self._entries()

    def _entries(self) -> list[RegistryEntry]:
        if not self.path.exists():
            return []
        if self.anchor is not None:
            self.anchor(self.path)
        return read_chain(
            self.path, RegistryEntry, lambda e: e.previous, _edited,
            what="registry entry", chain="registry chain",
        )  # fmt: skip

    def state(self) -> dict[str, RegistryEntry]:
        """Latest entry per scorecard hash."""
        latest: dict[str, RegistryEntry] = {}
        for e in self.entries():
            latest[e.scorecard_hash] = e
        return latest

    def retired(self, scorecard_hash: str) -> str | None:
        e = self.state().get(scorecard_hash)
        return e.type if e and e.type != "published" else None

    @contextlib.contextmanager
    def _lock(self, kind: int) -> Iterator[None]:
        """A `flock` on the sidecar lock file (readers of the registry file never need it)."""
        lock = self.path.with_name(self.path.name + ".lock")
        if kind == fcntl.LOCK_EX:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        else:
            try:
                fd = os.open(lock, os.O_RDONLY)
            except OSError:  # no lock file (or a read-only copy): nobody is writing here
                yield
                return
        try:
            fcntl.flock(fd, kind)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time: read the state, decide, append and re-sign under one exclusive
        lock."""
        with self._lock(fcntl.LOCK_EX):
            self._writing = True
            try:
                yield
            finally:
                self._writing = False

    def _append(self, e: RegistryEntry) -> RegistryEntry:
        e = e.sealed()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_record(self.path, e.model_dump(mode="json"))
        if self.sealer is not None:
            self.sealer(self.path)
        return e

    def seal(self) -> None:
        """Re-sign the head over the registry as it is (after checking its chain): for a
        registry that has no head yet, or one a crash left between an append and its head."""
        if self.sealer is None:
            raise InputError("sealing needs the signing key")
        with self._locked():
            anchor, self.anchor = self.anchor, None
            try:
                self._entries()  # the chain and every entry's seal must hold
            finally:
                self.anchor = anchor
            self.sealer(self.path)

    def _previous(self) -> str | None:
        es = self.entries()
        return digest(es[-1].model_dump(mode="json")) if es else None

    def add(
        self, scorecard: Path, derived_from: str | None = None, check: Check | None = None
    ) -> RegistryEntry:
        """Register a publishable scorecard; with `check`, only one it accepts (an
        EvidenceError naming why, otherwise)."""
        try:
            card = load_result(scorecard)
        except (ValueError, ValidationError) as exc:
            raise InputError(f"not a publishable scorecard: {exc}", file=str(scorecard)) from exc
        if not isinstance(card, PublishableScorecard):
            raise InputError("incomplete evidence cannot be registered", file=str(scorecard))
        if card.proof.protocol_status != "frozen":  # the model refuses it too: the backstop
            raise InputError(
                f"{R.PROTOCOL_NOT_FROZEN}: a draft never publishes", file=str(scorecard)
            )
        if check is not None:
            problems = check(scorecard)
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise EvidenceError(f"refused: {problems[0]}{more}")
        h = card.scorecard_hash()
        with self._locked():
            return self._add(card, h, scorecard, derived_from)

    def _add(
        self, card: PublishableScorecard, h: str, scorecard: Path, derived_from: str | None
    ) -> RegistryEntry:
        state = self.state()
        if h in state:
            raise InputError(f"already registered: {h}", file=str(scorecard))
        if derived_from and card.derived_from and derived_from != card.derived_from:
            raise InputError(
                f"--derived-from {derived_from} differs from the scorecard's own derived_from "
                f"{card.derived_from}",
                file=str(scorecard),
            )
        derived_from = derived_from or card.derived_from
        if derived_from is not None:
            source = state.get(derived_from)
            if source is None:
                raise InputError(f"derived_from {derived_from} is not in the registry")
            # A regrade re-judges the same subject's evidence under the same protocol record.
            same = (source.subject_id, source.subject_config_hash, source.protocol_hash)
            if same != (card.subject_id, card.subject_config_hash, card.protocol_hash):
                raise InputError(
                    f"derived_from {derived_from} is another subject's or protocol's scorecard",
                    file=str(scorecard),
                )
        return self._append(
            RegistryEntry(
                type="published",
                scorecard_hash=h,
                protocol_hash=card.protocol_hash,
                subject_id=card.subject_id,
                subject_config_hash=card.subject_config_hash,
                location=str(scorecard),
                derived_from=derived_from,
                recorded_at=_now(),
                previous=self._previous(),
            )
        )

    def retire(
        self,
        kind: Literal["superseded", "withdrawn"],
        target: str,
        adjudication: str,
        replacement_protocol_hash: str | None = None,
        replacement_scorecard_hash: str | None = None,
    ) -> RegistryEntry:
        with self._locked():
            return self._retire(
                kind, target, adjudication, replacement_protocol_hash, replacement_scorecard_hash
            )

    def _retire(
        self,
        kind: Literal["superseded", "withdrawn"],
        target: str,
        adjudication: str,
        replacement_protocol_hash: str | None,
        replacement_scorecard_hash: str | None,
    ) -> RegistryEntry:
        current = self.state().get(target)
        if current is None:
            raise InputError(f"{target} is not in the registry")
        if current.type != "published":
            raise InputError(f"{target} is already {current.type}")
        if not adjudication.strip():
            raise InputError("an adjudication text is required")
        if kind == "superseded" and (
            replacement_protocol_hash is None or not is_digest(replacement_protocol_hash)
        ):
            raise InputError("superseding needs --replacement-protocol sha256:<64 hex>")
        return self._append(
            current.model_copy(
                update={
                    "type": kind,
                    "adjudication": adjudication,
                    "replacement_protocol_hash": replacement_protocol_hash,
                    "replacement_scorecard_hash": replacement_scorecard_hash,
                    "recorded_at": _now(),
                    "previous": self._previous(),
                }
            )
        )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
