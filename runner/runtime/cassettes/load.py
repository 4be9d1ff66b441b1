"""Reading a cassette of any kind (format.py's scripted / recorded, policy.py's policy) and its
canonical bytes; above both, so neither imports the other's reader."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from runner.evaluator.core.canonical import CanonicalError, canonical_bytes, digest, parse_json
from runner.evaluator.core.errors import InputError
from runner.runtime.cassettes.format import CASSETTE_VERSION, Cassette, where
from runner.runtime.cassettes.policy import PolicyCassette, parse_policy


def cassette_bytes(cassette: Cassette | PolicyCassette) -> bytes:
    """RFC 8785 bytes of the cassette: what is stored as a blob and hashed."""
    return canonical_bytes(cassette.model_dump(mode="json"))


def cassette_digest(cassette: Cassette | PolicyCassette) -> str:
    return digest(cassette.model_dump(mode="json"))


def parse_cassette(data: bytes, source: str) -> Cassette | PolicyCassette:
    """Validate cassette bytes; every problem is an InputError naming `source` and the entry."""
    try:
        raw = parse_json(data)
    except (ValueError, CanonicalError) as exc:
        raise InputError(f"not a JSON cassette: {exc}", file=source) from exc
    if not isinstance(raw, dict):
        raise InputError("a cassette is a JSON object", file=source)
    version = raw.get("version")
    if version != CASSETTE_VERSION or isinstance(version, bool):
        raise InputError(
            f"unknown cassette version {version!r}; expected {CASSETTE_VERSION}",
            file=source,
            key="version",
        )
    if raw.get("kind") == "policy":
        return parse_policy(raw, source)
    try:
        return Cassette.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(f"{err['msg']}{more}", file=source, key=where(err["loc"])) from exc


def load_cassette(path: Path) -> Cassette | PolicyCassette:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read cassette: {exc.strerror}", file=str(path)) from exc
    return parse_cassette(data, str(path))
