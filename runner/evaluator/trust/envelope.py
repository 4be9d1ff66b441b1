"""Open a DSSE envelope: its payload, only when a trusted key's signature verifies over it.

The envelope format and its pre-authentication encoding are securesystemslib's
(`securesystemslib.dsse.Envelope`); this module only decides what is refused and says why.
Every refusal is a `TrustError` (evidence: exit 3) naming the file and the reason.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import Key  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core import bounded
from runner.evaluator.core.canonical import canonical_bytes, parse_json
from runner.evaluator.core.errors import EvidenceError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MAX_ENVELOPE_BYTES = 1 << 20


class TrustError(EvidenceError):
    """A signature is missing, untrusted or does not verify, or signed bytes were changed."""


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """A regular file's bytes, refused (never opened) when it is anything else or too large."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise TrustError(f"{path}: missing ({what})") from None
    except OSError as exc:
        raise TrustError(f"{path}: cannot read ({what}): {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise TrustError(f"{path}: not a regular file ({what})")
    if st.st_size > limit:
        raise TrustError(f"{path}: larger than {limit} bytes ({what})")
    return bounded.read_bounded(path, limit, evidence=True)  # no FIFO swapped in is waited on


def short(keyid: str) -> str:
    return keyid[:16]


def open_envelope(data: bytes, trusted: Mapping[str, Key], where: str) -> bytes:
    """The payload of a DSSE envelope signed by at least one trusted key; TrustError otherwise."""
    return open_envelope_keys(data, trusted, where)[0]


def open_envelope_keys(
    data: bytes, trusted: Mapping[str, Key], where: str
) -> tuple[bytes, list[Key]]:
    """(payload, every trusted key whose signature verifies over it): the keys, so that the
    caller can hold each against its validity window (window.py) at the payload's signed time."""
    try:
        doc = parse_json(data)
        if not isinstance(doc, dict) or set(doc) != {"payload", "payloadType", "signatures"}:
            raise ValueError("expected exactly payload, payloadType and signatures")
        envelope = Envelope.from_dict(doc)
    except (ValueError, KeyError, TypeError, AttributeError, FormatError) as exc:
        raise TrustError(f"{where}: not a DSSE envelope: {str(exc)[:200]}") from exc
    if canonical_bytes(envelope.to_dict()) + b"\n" != data:
        # base64 and JSON have other spellings of the same envelope; only one is accepted, so
        # no byte of a signature file can change unnoticed
        raise TrustError(f"{where}: not in its canonical form (RFC 8785, one line): edited?")
    if envelope.payload_type != PAYLOAD_TYPE:
        raise TrustError(f"{where}: payload type {envelope.payload_type[:80]!r} is not "
                         f"{PAYLOAD_TYPE!r}")  # fmt: skip
    if not envelope.signatures:
        raise TrustError(f"{where}: unsigned (the envelope holds no signature)")
    known = [trusted[k] for k in envelope.signatures if k in trusted]
    if not known:
        ids = ", ".join(short(k) for k in sorted(envelope.signatures))
        raise TrustError(f"{where}: signed only by untrusted key(s) {ids}; trusted keys are "
                         "listed in keys/trusted/ (or AFB_TRUSTED_KEYS)")  # fmt: skip
    verified: list[Key] = []
    failure: Exception | None = None
    for key in known:  # each key on its own: verify() stops at the threshold's first key
        try:
            envelope.verify([key], 1)
            verified.append(key)
        except (VerificationError, ValueError) as exc:
            failure = exc
    if not verified:
        raise TrustError(f"{where}: the signature does not verify: the signed payload or its "
                         f"signature was changed ({failure})") from failure  # fmt: skip
    return envelope.payload, verified


def open_statement(
    path: Path, trusted: Mapping[str, Key], predicate_type: str, what: str
) -> tuple[bytes, dict[str, Any]]:
    """(payload, parsed in-toto Statement) a trusted key signed in the envelope at `path`."""
    payload, st, _ = open_statement_keys(path, trusted, predicate_type, what)
    return payload, st


def open_statement_keys(
    path: Path, trusted: Mapping[str, Key], predicate_type: str, what: str
) -> tuple[bytes, dict[str, Any], list[Key]]:
    """open_statement, and the trusted keys whose signatures verified."""
    data = read_bounded(path, MAX_ENVELOPE_BYTES, what)
    payload, keys = open_envelope_keys(data, trusted, str(path))
    try:
        st = parse_json(payload)
    except ValueError as exc:
        raise TrustError(f"{path}: the signed payload is not JSON: {exc}") from exc
    if not isinstance(st, dict) or st.get("_type") != STATEMENT_TYPE:
        raise TrustError(f"{path}: the signed payload is not an in-toto Statement v1")
    if st.get("predicateType") != predicate_type:
        raise TrustError(f"{path}: predicate type is not {predicate_type!r}")
    return payload, st, keys


def subject_sha256(st: dict[str, Any], where: str) -> dict[str, str]:
    """name -> sha256 hex of a statement's subjects."""
    out: dict[str, str] = {}
    subjects = st.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise TrustError(f"{where}: the statement names no subject")
    for s in subjects:
        digest = s.get("digest") if isinstance(s, dict) else None
        name = s.get("name") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha, str):
            raise TrustError(f"{where}: a statement subject without name and sha256")
        out[name] = sha
    return out
