"""A trusted key's validity window, and the signed time a signature is judged at.

A key retired (its private part left behind, or replaced by the project's one publisher key)
keeps verifying what it signed while it was in use and nothing it signs afterwards. Its window is
declared beside its public key: `<name>.pub` + `<name>.window.toml`:

    not_before = 2026-12-02T06:00:00Z   # optional: when the key was made
    not_after = 2026-12-01T18:56:31Z    # optional: when it was retired
    note = "why"                        # optional

A key without a window file is trusted without a time limit (a test's throw-away key, a
verifier's own `AFB_TRUSTED_KEYS` directory).

The time compared with the window is a *signed* time, never a file's mtime:

- exact: `signed_at` in the signed predicate (the run signature's and the registry head's; every
  signature made since windows exist carries it);
- at least: for a signature made before `signed_at` existed, the latest time the signed bytes
  themselves record (a run's journals: each line's `at_ns`; the registry: each line's
  `recorded_at`). The signature was made after that, so it is a lower bound: enough to refuse a
  retired key's signature over evidence recorded after its retirement, and compared with
  `not_after` only (a bundle recorded before its key was made may be signed later).

A signer holding a retired private key can still write an earlier `signed_at`: a window bounds a
key that is retired, not one that is stolen (that needs a timestamp authority or a transparency
log; keys/README.md).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import AwareDatetime, ValidationError
from securesystemslib.signer import Key, SSlibKey  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core import bounded
from runner.evaluator.core.bounded import JOURNAL_LINE_CAP
from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import StrictFrozen

from .envelope import TrustError, short

WINDOW_SUFFIX = ".window.toml"
WINDOW_FIELD = "x-afb-window"  # where the window rides on the key (securesystemslib's extra fields)
MAX_WINDOW_BYTES = 4096
MAX_TAIL_BYTES = JOURNAL_LINE_CAP  # a journal's last line is read from at most this many bytes
SIGNED_AT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"


class KeyWindow(StrictFrozen):
    not_before: AwareDatetime | None = None
    not_after: AwareDatetime | None = None
    note: str = ""


class SignedTime(StrictFrozen):
    at: AwareDatetime
    exact: bool  # False: a lower bound taken from the signed bytes (a signature without signed_at)
    source: str  # what it was read from, for the refusal message


def now_signed_at() -> str:
    """The `signed_at` a signer writes now (RFC 3339, UTC, seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_signed_at(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def read_window(pub: Path) -> KeyWindow | None:
    """The window declared beside `pub` (`<name>.window.toml`), or None."""
    path = pub.with_name(pub.name.removesuffix(".pub") + WINDOW_SUFFIX)
    if not path.exists():
        return None
    data = bounded.read_bounded(path, MAX_WINDOW_BYTES)
    try:
        raw = tomllib.loads(data.decode())
        window = KeyWindow.model_validate(raw, strict=False)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not TOML: {exc}", file=str(path)) from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(err["msg"], file=str(path),
                         key=".".join(str(p) for p in err["loc"])) from exc  # fmt: skip
    if window.not_before and window.not_after and window.not_before > window.not_after:
        raise InputError("not_before is after not_after", file=str(path), key="not_before")
    return window


def with_window(key: SSlibKey, window: KeyWindow | None) -> SSlibKey:
    """The same key carrying its window (the trusted mapping stays keyid -> Key)."""
    if window is None:
        return key
    extra = {WINDOW_FIELD: window.model_dump(mode="json")}
    return SSlibKey(key.keyid, key.keytype, key.scheme, key.keyval, extra)


def window_of(key: Key) -> KeyWindow | None:
    raw = key.unrecognized_fields.get(WINDOW_FIELD)
    return None if raw is None else KeyWindow.model_validate(raw, strict=False)


def refusal(key: Key, when: SignedTime) -> str | None:
    """Why `key`'s window does not hold a signature made at `when` (None: it does)."""
    window = window_of(key)
    if window is None:
        return None
    if window.not_after is not None and when.at > window.not_after:
        word = "signed at" if when.exact else "signed after"
        return (f"key {short(key.keyid)} was retired at {_iso(window.not_after)}, and this "
                f"signature was {word} {_iso(when.at)} ({when.source})")  # fmt: skip
    if when.exact and window.not_before is not None and when.at < window.not_before:
        return (f"key {short(key.keyid)} is valid from {_iso(window.not_before)}, and this "
                f"signature says it was signed at {_iso(when.at)} ({when.source})")  # fmt: skip
    return None


def check_window(keys: Sequence[Key], when: SignedTime, where: str) -> None:
    """At least one of the keys whose signature verified was valid at the signed time."""
    reasons = [r for k in keys if (r := refusal(k, when)) is not None]
    if keys and len(reasons) == len(keys):
        raise TrustError(f"{where}: outside its key's validity window: {'; '.join(reasons)}")


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def exact(signed_at: str, source: str) -> SignedTime:
    return SignedTime(at=parse_signed_at(signed_at), exact=True, source=source)


def latest_journal_time(files: Iterable[Path], source: str) -> SignedTime | None:
    """The latest `at_ns` of the journals' last lines (each journal is appended in time order)."""
    latest: int | None = None
    for path in files:
        line = _last_line(path)
        try:
            doc = parse_json(line) if line else None
            at = int(doc["at_ns"]) if isinstance(doc, dict) else None
        except (ValueError, KeyError, TypeError):
            raise TrustError(f"{path}: its last line carries no at_ns") from None
        if at is not None:
            latest = at if latest is None else max(latest, at)
    if latest is None:
        return None
    at_dt = datetime.fromtimestamp(latest / 1e9, UTC)
    return SignedTime(at=at_dt, exact=False, source=source)


def latest_recorded_at(data: bytes, source: str) -> SignedTime | None:
    """The latest `recorded_at` of an append-only log's lines (the registry)."""
    latest: datetime | None = None
    for line in data.splitlines():
        doc = parse_json(line) if line.strip() else None
        value = doc.get("recorded_at") if isinstance(doc, dict) else None
        if isinstance(value, str):
            try:
                t = parse_signed_at(value)
            except ValueError:
                raise TrustError(f"{source}: recorded_at {value[:40]!r} is not a time") from None
            latest = t if latest is None else max(latest, t)
    return None if latest is None else SignedTime(at=latest, exact=False, source=source)


def _last_line(path: Path) -> bytes:
    """The journal's last line, read from its end (64 KiB, doubled while the line is longer,
    up to one journal line's cap): a bundle of many journals is not read whole for a time."""
    size = path.stat().st_size
    want = 64 << 10
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as fh:
        while True:
            fh.seek(max(0, size - want))
            tail = fh.read(want).rstrip(b"\n")
            if b"\n" in tail or want >= size:
                return tail.rsplit(b"\n", 1)[-1]
            if want > MAX_TAIL_BYTES:
                raise TrustError(f"{path}: its last line is longer than {MAX_TAIL_BYTES} bytes")
            want *= 2
