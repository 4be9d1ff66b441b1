"""Known-answer vectors the tests hold the code to, written by `bench vectors regenerate`: one
module per family, each a pure function of the checkout's files to the bytes of its vector files.

- `identity`: vectors/identity/*.json, the protocol identities of two specs (a fixed evaluator
  digest, so they move only with the spec language, a hashing rule, a witness contract or a task
  file);
- `environment`: vectors/environment/*.json, execution-environment artifacts and the conformance
  cases under vectors/environment/spec.toml's policy.

`--check` compares every family without writing (exit 3 naming each file that would change):
what tests/foundation/test_identity_vectors.py and tests/environment/test_conformance.py assert.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.evaluator.core.inputs import project_root
from runner.vectors import environment, identity

# family (its folder under vectors/) -> its files, name -> text
FAMILIES: dict[str, Callable[[Path], dict[str, str]]] = {
    "identity": identity.files,
    "environment": environment.files,
}


def regenerate(root: Path | None = None, *, write: bool = True) -> dict[Path, bool]:
    """Every vector file of every family -> whether it changed (written when `write`). Every
    family is computed before anything is written: a failing one leaves every file as it was."""
    root = root or project_root()
    wanted = {
        root / "vectors" / family / name: text
        for family, build in FAMILIES.items()
        for name, text in build(root).items()
    }
    changed: dict[Path, bool] = {}
    for path, text in wanted.items():
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        changed[path] = old != text
    if write:
        for path, text in wanted.items():
            if changed[path]:
                path.write_text(text, encoding="utf-8")
    return changed
