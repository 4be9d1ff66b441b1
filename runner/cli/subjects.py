"""`bench subjects digest DIR` / `bench subjects build DIR...`: the digest a spec declares for a
subject's project or cassettes folder, and a subject's locked environment built outside the
runner's venv (docs/SUBJECTS.md). Replaces `python -m runner.runtime.subjects.environment` and the
`tree_digest` one-liner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import app, guarded, out
from runner.evaluator.core.errors import InputError

subjects_app = typer.Typer(
    help="Third-party subjects: folder digests and locked environments.", no_args_is_help=True
)
app.add_typer(subjects_app, name="subjects")

Folders = Annotated[list[Path], typer.Argument(help="folders, e.g. subjects/mini-swe-agent")]


def _folder(path: Path) -> Path:
    if not path.is_dir():
        raise InputError("not a folder", file=str(path))
    return path


@subjects_app.command("digest")
@guarded
def digest(folders: Folders) -> None:
    """Print the tree digest of each folder: what a spec declares as `environment.digest` (a
    uv project) or `model.digest` (a cassettes folder)."""
    from runner.runtime.subjects.tree import tree_digest

    for f in folders:
        out.print(f"{tree_digest(_folder(f))}  {f}", markup=False)


@subjects_app.command("build")
@guarded
def build(folders: Folders) -> None:
    """Build each uv project's locked environment (`uv sync --frozen`) into
    /var/lib/afb/subject-envs/<name>-<digest>, once; print its digest and path."""
    from runner.evaluator.core.inputs import project_root
    from runner.runtime.subjects.config import UvEnvironment
    from runner.runtime.subjects.environment import ensure_built
    from runner.runtime.subjects.tree import tree_digest

    root = project_root()
    for f in folders:
        project = _folder(f).resolve()
        if not project.is_relative_to(root):
            raise InputError(f"not inside the checkout {root}", file=str(f))
        rel = project.relative_to(root).as_posix()
        env = UvEnvironment(project=rel, digest=tree_digest(project))
        b = ensure_built(env, root=root)
        out.print(f"{rel}: {b.digest} -> {b.path}", markup=False)
