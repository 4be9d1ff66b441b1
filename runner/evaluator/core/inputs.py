"""The evaluator's build inputs and `evaluator_digest`, from one declaration.

The digest is derived from the files themselves, never from a version string the running process
reports: NAR-style SHA-256 over the declared paths, so `nix hash path` over an export of the same
paths (see `export_inputs`) gives the same hex.

Where the project's data lives (evaluator-inputs.json, images/, specs/, witnesses/): `AFB_ROOT`
when set (an installed `bench`: the Nix wrapper and images set it to a store copy), else the
checkout this package sits in. An installed package whose evaluator code differs from the one
under `AFB_ROOT` is refused: the digest would describe other code than the code that runs.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .canonical import parse_json
from .errors import InputError
from .nar import VirtualTree, nar_sha256, nar_sha256_virtual

DECLARATION = "evaluator-inputs.json"
ROOT_ENV = "AFB_ROOT"
# The package's own files, compared with the root's when the package is installed elsewhere.
_PACKAGE = Path(__file__).resolve().parents[2]  # .../runner
_CODE = ("runner/__init__.py", "runner/evaluator")


@dataclass(frozen=True)
class InputsDeclaration:
    paths: tuple[str, ...]
    exclude_names: frozenset[str]
    exclude_suffixes: tuple[str, ...]

    def include(self, path: Path) -> bool:
        return path.name not in self.exclude_names and not path.name.endswith(self.exclude_suffixes)


def project_root() -> Path:
    """`AFB_ROOT` if set, else the checkout that holds this package; an InputError otherwise."""
    given = os.environ.get(ROOT_ENV)
    if given:
        root = Path(given).absolute()
        if not (root / DECLARATION).is_file():
            raise InputError(
                f"{ROOT_ENV}={given} holds no {DECLARATION}: point it at a checkout of "
                "agent-fault-bench (or the copy the Nix wrapper names)",
                key=ROOT_ENV,
            )
        return root
    here = _PACKAGE.parent
    if (here / DECLARATION).is_file():
        return here
    raise InputError(
        f"bench is installed without its project data ({here} holds no {DECLARATION}, no images/, "
        f"specs/ or witnesses/): set {ROOT_ENV} to a checkout of agent-fault-bench",
        key=ROOT_ENV,
    )


def check_running_code(root: Path, decl: InputsDeclaration) -> None:
    """Refuse when the running evaluator package is not byte-identical to the one under `root`
    (checked for the running root only: another tree's digest is just that tree's)."""
    given = os.environ.get(ROOT_ENV)
    if _PACKAGE.parent == root.resolve() or not given or Path(given).resolve() != root.resolve():
        return
    for rel in _CODE:
        ours, theirs = _PACKAGE.parent / rel, root / rel
        if not os.path.lexists(theirs) or nar_sha256(ours, decl.include) != nar_sha256(
            theirs, decl.include
        ):
            raise InputError(
                f"the running evaluator ({ours}) differs from {theirs}: evaluator_digest would "
                f"describe other code; set {ROOT_ENV} to the tree this bench was installed from",
                key=ROOT_ENV,
            )


def load_declaration(root: Path) -> InputsDeclaration:
    path = root / DECLARATION
    try:
        raw = parse_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read the evaluator input declaration: {exc}", file=str(path)
        ) from exc
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object", file=str(path))
    paths = raw.get("paths")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise InputError("expected a list of relative paths", file=str(path), key="paths")
    for key in ("exclude_names", "exclude_suffixes"):
        names = raw.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InputError("expected a list of strings", file=str(path), key=key)
    for rel in paths:
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise InputError(f"{rel!r} is not inside the checkout", file=str(path), key="paths")
    return InputsDeclaration(
        paths=tuple(paths),
        exclude_names=frozenset(raw.get("exclude_names", [])),
        exclude_suffixes=tuple(raw.get("exclude_suffixes", [])),
    )


def _tree(root: Path, decl: InputsDeclaration) -> VirtualTree:
    tree: VirtualTree = {}
    for rel in decl.paths:
        source = root / rel
        if not os.path.lexists(source):
            raise InputError(f"declared evaluator input {rel!r} does not exist", file=DECLARATION)
        parts = Path(rel).parts
        node = tree
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InputError(f"{rel!r} overlaps another declared path", file=DECLARATION)
            node = child
        if parts[-1] in node:
            raise InputError(f"{rel!r} is declared twice or overlaps", file=DECLARATION)
        node[parts[-1]] = source
    return tree


def evaluator_digest(root: Path | None = None) -> str:
    """The digest of `root`'s declared inputs; by default of the running evaluator's own root."""
    root = root or project_root()
    decl = load_declaration(root)
    check_running_code(root, decl)
    return "sha256:" + nar_sha256_virtual(_tree(root, decl), decl.include)


def export_inputs(root: Path, dest: Path) -> None:
    """Copy exactly the declared inputs to `dest` (links and exec bits kept) for `nix hash path`."""
    decl = load_declaration(root)
    for rel in decl.paths:
        source, target = root / rel, dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(
                source,
                target,
                symlinks=True,
                ignore=lambda d, names: [n for n in names if not decl.include(Path(d) / n)],
            )
        else:
            shutil.copy2(source, target, follow_symlinks=False)
