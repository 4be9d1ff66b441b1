"""A folder's digest: what a spec declares for a subject's project (`environment.digest`) or
cassettes folder (`model.digest`); `bench subjects digest` prints it.

RFC 8785 + SHA-256 of `{schema, files: {relative path: sha256 of bytes}}`, regular files only,
`__pycache__` and `*.pyc` left out (an interpreter may create them beside the sources; they are
not inputs). The evaluator never computes it: the declared digest enters `subject_config_hash`
as written, and the runtime refuses to run when the files on disk do not hash to it.
"""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.core.bounded import TASK_FILE_CAP, check_tree, sha256_bounded
from runner.evaluator.core.canonical import digest

TREE_SCHEMA = "afb.tree/1"


def _ignored(rel: Path) -> bool:
    return "__pycache__" in rel.parts or rel.suffix == ".pyc"


def tree_files(root: Path) -> dict[str, str]:
    """Relative path -> sha256 hex of every regular file under `root` (sorted, ignored left out)."""
    if root.is_dir() and not root.is_symlink():
        check_tree(root)  # bounded: a huge or sparse file fails fast, named
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if _ignored(rel) or p.is_symlink() or not p.is_file():
            continue
        # size before content: a sparse giant is refused by its stat size, the rest streamed
        out[rel.as_posix()] = sha256_bounded(p, TASK_FILE_CAP, evidence=False)[len("sha256:") :]
    return out


def tree_digest(root: Path) -> str:
    """The digest of a folder's contents (see the module docstring)."""
    return digest({"schema": TREE_SCHEMA, "files": tree_files(root)})
