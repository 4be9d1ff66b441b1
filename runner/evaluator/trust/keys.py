"""The trusted public keys: ed25519 keys as PEM files (`*.pub`) in one directory.

The repository lists them in keys/trusted/ (keys/README.md says whose each is); `AFB_TRUSTED_KEYS`
names other directories instead (separated by `:`; a test's key beside the repository's, or a
verifier who trusts other signers). The list is not an evaluator input: adding a signer does not
change any protocol hash. A key may carry a validity window (`<name>.window.toml`, window.py):
a retired key verifies what it signed before its retirement and nothing after.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root

from .window import read_window, with_window

TRUSTED_ENV = "AFB_TRUSTED_KEYS"
MAX_KEY_BYTES = 4096  # a PEM ed25519 public key is 113 bytes


def trusted_dirs() -> list[Path]:
    """The directories `AFB_TRUSTED_KEYS` names if set, else the repository's keys/trusted/."""
    given = os.environ.get(TRUSTED_ENV)
    if given:
        return [Path(p) for p in given.split(os.pathsep) if p]
    return [project_root() / "keys" / "trusted"]


def public_key_from_pem(data: bytes, where: str) -> SSlibKey:
    """An ed25519 public key (SubjectPublicKeyInfo PEM) as a securesystemslib key."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InputError(f"not a PEM public key: {exc}", file=where) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InputError("not an ed25519 public key", file=where)
    return SSlibKey.from_crypto(key)


def read_public_key(path: Path) -> SSlibKey:
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(f"cannot read the public key: {exc.strerror}", file=str(path)) from exc
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_KEY_BYTES:
        raise InputError("not a public key file (a regular file of a few hundred bytes)",
                         file=str(path))  # fmt: skip
    return public_key_from_pem(path.read_bytes(), str(path))


def trusted_keys(directory: Path | None = None) -> dict[str, SSlibKey]:
    """keyid -> key of every `*.pub` in the directory given, else in `trusted_dirs()` (the
    trusted list), each with its validity window if one is declared beside it. A missing
    directory is an error; an empty one trusts nobody."""
    keys: dict[str, SSlibKey] = {}
    for where in [directory] if directory is not None else trusted_dirs():
        if not where.is_dir():
            raise InputError(f"no trusted-keys directory (set {TRUSTED_ENV} or add "
                             "keys/trusted/)", file=str(where))  # fmt: skip
        for path in sorted(where.glob("*.pub")):
            key = with_window(read_public_key(path), read_window(path))
            keys[key.keyid] = key
    return keys
