"""The runner's signing key: ed25519, created by `bench keys init`, readable by its owner only.

Where: `AFB_KEY_DIR`, else /etc/afb/keys. The directory is mode 0700 and the private key 0600,
both owned by the user who runs bench (root, for a real run): subjects run as `nobody` and cannot
read it, and it is never inside a run directory (a bundle is copied and published whole). A key
that others can read is refused, not used.

Files: `signing.key` (PKCS#8 PEM, unencrypted: the protection is the file mode) and `signing.pub`
(SubjectPublicKeyInfo PEM, the file to copy into keys/trusted/ for verifiers to trust).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.signer import CryptoSigner, SSlibKey

from runner.evaluator.core.errors import InputError

KEY_DIR_ENV = "AFB_KEY_DIR"
DEFAULT_KEY_DIR = Path("/etc/afb/keys")
PRIVATE = "signing.key"
PUBLIC = "signing.pub"


def key_dir(given: Path | None = None) -> Path:
    if given is not None:
        return given
    env = os.environ.get(KEY_DIR_ENV)
    return Path(env) if env else DEFAULT_KEY_DIR


@dataclass(frozen=True)
class PublicKey:
    path: Path
    pem: bytes
    keyid: str


def init_keys(directory: Path | None = None) -> PublicKey:
    """Create a key pair; never overwrite one (a replaced key would orphan every signature)."""
    where = key_dir(directory)
    if (where / PRIVATE).exists() or (where / PUBLIC).exists():
        raise InputError("a signing key already exists here; it is never overwritten",
                         file=str(where))  # fmt: skip
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(where, 0o700)
    except OSError as exc:
        raise InputError(
            f"cannot create the key directory: {exc.strerror}", file=str(where)
        ) from exc
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_new(where / PRIVATE, private, 0o600)
    _write_new(where / PUBLIC, public, 0o644)
    return PublicKey(where / PUBLIC, public, SSlibKey.from_crypto(key.public_key()).keyid)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _private_enough(path: Path, what: str) -> os.stat_result:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"the {what} is a symlink; refused", file=str(path))
    if st.st_uid != os.geteuid():
        raise InputError(f"the {what} belongs to uid {st.st_uid}, not to this user", file=str(path))
    if st.st_mode & 0o077:
        raise InputError(
            f"the {what} is accessible to others (mode {stat.S_IMODE(st.st_mode):o}); "
            "refused: chmod it to 0700 (directory) / 0600 (key)",
            file=str(path),
        )
    return st


def has_key(directory: Path | None = None) -> bool:
    return (key_dir(directory) / PRIVATE).exists()


def load_signer(directory: Path | None = None) -> CryptoSigner:
    """The signer of the private key in the key directory, after checking nobody else can read
    it; InputError (naming `bench keys init`) when there is none."""
    where = key_dir(directory)
    path = where / PRIVATE
    if not path.exists():
        raise InputError(
            f"no signing key (set {KEY_DIR_ENV} or create one with `bench keys init`)",
            file=str(path),
        )
    _private_enough(where, "key directory")
    _private_enough(path, "private key")
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"not a PEM private key: {exc}", file=str(path)) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError("not an ed25519 private key", file=str(path))
    return CryptoSigner(key, SSlibKey.from_crypto(key.public_key()))


def public_key(directory: Path | None = None) -> PublicKey:
    where = key_dir(directory)
    signer = load_signer(where)
    pem = (where / PUBLIC).read_bytes() if (where / PUBLIC).is_file() else b""
    return PublicKey(where / PUBLIC, pem, signer.public_key.keyid)
