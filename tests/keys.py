"""A throw-away signing key for tests, and the environment that trusts it.

`TestKey.create(dir)` makes a key pair the way `bench keys init` does (private key 0600 in a 0700
directory) and a trusted-keys directory holding only its public key. `TestKey.env()` is what a
test sets (`AFB_KEY_DIR`, `AFB_TRUSTED_KEYS`) so the CLI signs with it and trusts it; the
repository's keys/trusted/ is then not consulted. `sign(run_dir)` signs an evaluated run
(runner/signing/sign.py), as `bench run` / `bench evaluate` do when a key is configured.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from securesystemslib.signer import CryptoSigner

from runner.evaluator.trust.keys import TRUSTED_ENV
from runner.signing.keys import KEY_DIR_ENV, PUBLIC, init_keys, load_signer
from runner.signing.sign import sign_results


@dataclass(frozen=True)
class TestKey:
    __test__ = False  # not a test class

    key_dir: Path
    trusted_dir: Path
    keyid: str

    @classmethod
    def create(cls, root: Path) -> TestKey:
        made = init_keys(root / "key")
        trusted = root / "trusted"
        trusted.mkdir()
        shutil.copyfile(made.path.parent / PUBLIC, trusted / "test.pub")
        return cls(made.path.parent, trusted, made.keyid)

    def signer(self) -> CryptoSigner:
        return load_signer(self.key_dir)

    def env(self, *also_trusted: Path) -> dict[str, str]:
        """Sign with this key and trust it (and the directories in `also_trusted`, e.g. the
        repository's keys/trusted/, so published bundles still verify)."""
        trusted = os.pathsep.join(str(p) for p in (self.trusted_dir, *also_trusted))
        return {KEY_DIR_ENV: str(self.key_dir), TRUSTED_ENV: trusted}

    def sign(self, run_dir: Path) -> Path:
        sign_results(run_dir, self.signer())
        return run_dir
