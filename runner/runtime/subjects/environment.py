"""A subject's installed environment: a locked uv project built outside the runner's venv.

Why: a third-party agent (mini-swe-agent and its ~80 dependencies) must not share the runner's
interpreter packages, and what it ran with must be pinned by content. The project folder
(`subjects/<name>/`: pyproject.toml, uv.lock, the subject's glue sources) hashes to its
`tree_digest` (runner/runtime/subjects/tree.py); the spec declares that digest (it enters
`subject_config_hash`); the environment is built with `uv sync --frozen` (the lock is the only
resolution) into
`/var/lib/afb/subject-envs/<name>-<digest 16>/` with the system interpreter, world-readable so the
unprivileged subject can run it. A folder is complete only when its marker (`afb-env.json`, written
last) names the digest; anything else there is rebuilt. Building under a lock makes concurrent
runs safe; a complete environment is used without the lock, so a user who may not write the
environments root (the no-root test loop) runs what root built, and one that is not built there
is an InputError saying to build it as root. `bench subjects build PROJECT...` builds
(scripts/setup.sh calls it).

`sweep_environments` (`bench sweep`) removes what a crashed build left (a folder without its
marker) and, with `stale=True` (`bench sweep --subject-envs`), every built environment whose
project folder no longer hashes to the digest it was built from: it can never be used again,
since a spec's declared digest must equal the project's digest on disk. A folder whose build
lock is held is never touched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.runtime.subjects.config import UvEnvironment
from runner.runtime.subjects.tree import tree_digest

ENV_ROOT = Path("/var/lib/afb/subject-envs")
MARKER = "afb-env.json"
PYTHON = "/usr/bin/python3"  # readable by every uid, unlike a uv-managed interpreter under ~root


@dataclass(frozen=True)
class BuiltEnvironment:
    path: Path  # the folder named by the digest
    digest: str

    @property
    def python(self) -> Path:
        return self.path / "venv" / "bin" / "python"

    @property
    def project(self) -> Path:
        """The project's files as built (the subject's glue sources are imported from here)."""
        return self.path / "project"


def uv_binary() -> str:
    for cand in (os.environ.get("AFB_UV"), str(project_root() / ".tools" / "bin" / "uv")):
        if cand and Path(cand).is_file():
            return cand
    found = shutil.which("uv")
    if found is None:
        raise InputError("uv not found (AFB_UV, .tools/bin/uv or PATH); run scripts/setup.sh")
    return found


def check_declared(env: UvEnvironment, root: Path | None = None) -> Path:
    """The project folder, after checking it hashes to the declared digest (else InputError)."""
    root = root or project_root()
    project = (root / env.project).resolve()
    if not project.is_relative_to(root.resolve()) or not project.is_dir():
        raise InputError(f"subject environment project {env.project!r} is not a folder here")
    for required in ("pyproject.toml", "uv.lock"):
        if not (project / required).is_file():
            raise InputError(f"subject environment {env.project!r} has no {required}")
    actual = tree_digest(project)
    if actual != env.digest:
        raise InputError(
            f"subject environment {env.project!r} hashes to {actual}, the spec declares "
            f"{env.digest}: update environment.digest in the spec (a changed environment is a "
            "different subject)"
        )
    return project


class LockDenied(InputError):
    """The build lock cannot be created: this user may not write the environments root."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"cannot take the build lock {path}: permission denied (run as root)")
        self.path = path


@contextlib.contextmanager
def _locked(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the build lock at `path`; without `wait`, yield False when another process has it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "w")  # noqa: SIM115  # closed below, after the lock is released
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise LockDenied(path) from None
        raise
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _public(path: Path) -> None:
    for p in (path, *path.parents):
        if p == Path("/"):
            break
        with contextlib.suppress(OSError):
            os.chmod(p, p.stat().st_mode | 0o755)
        if p in (ENV_ROOT.parent.parent, Path("/var")):
            break


def target_for(env: UvEnvironment, root: Path | None = None) -> Path:
    name = Path(env.project).name
    return (root or ENV_ROOT) / f"{name}-{env.digest.removeprefix('sha256:')[:16]}"


def built(env: UvEnvironment, env_root: Path | None = None) -> BuiltEnvironment | None:
    target = target_for(env, env_root)
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("digest") != env.digest:
        return None
    return BuiltEnvironment(target, env.digest)


def ensure_built(
    env: UvEnvironment, *, root: Path | None = None, env_root: Path | None = None
) -> BuiltEnvironment:
    """Build (once) the declared environment; any failure is an InputError naming the project."""
    project = check_declared(env, root)
    base = env_root or ENV_ROOT
    target = target_for(env, base)
    # A complete environment (its marker is written last) is used as is, without the lock: a
    # user who cannot write the environments root (not root) can still run what root built.
    done = built(env, base)
    if done is not None:
        return done
    try:
        with _locked(base / ".locks" / f"{target.name}.lock"):
            return _build(env, project, base, target)
    except LockDenied as exc:
        raise InputError(
            f"subject environment {env.project!r} is not built ({target}) and this user cannot "
            f"build it ({exc.path}: permission denied): build it once as root with "
            f"`bench subjects build {env.project}` (scripts/setup.sh does)"
        ) from None


def _build(env: UvEnvironment, project: Path, base: Path, target: Path) -> BuiltEnvironment:
    """The build itself, under the lock."""
    done = built(env, base)  # another process may have built it while we waited
    if done is not None:
        return done
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(
        project, target / "project", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    cmd = [
        uv_binary(), "sync", "--frozen", "--no-install-project", "--no-dev",
        "--python", PYTHON, "--project", str(target / "project"),
    ]  # fmt: skip
    run_env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(target / "venv")}
    run_env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise InputError(
            f"subject environment {env.project!r} failed to build (uv sync --frozen exited "
            f"{r.returncode}): {r.stderr.strip()[-800:]}"
        )
    if tree_digest(target / "project") != env.digest:  # nothing changed under us
        shutil.rmtree(target, ignore_errors=True)
        raise InputError(f"subject environment {env.project!r} changed while building")
    (target / MARKER).write_text(
        json.dumps({"digest": env.digest, "project": env.project}, sort_keys=True) + "\n"
    )
    _public(target)
    for dirpath, dirnames, filenames in os.walk(target):
        for n in dirnames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o755)
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)
    return BuiltEnvironment(target, env.digest)


_NAME = re.compile(r"^(?P<name>.+)-(?P<digest>[0-9a-f]{16})$")


def _removable(folder: Path, root: Path, stale: bool) -> str | None:
    """Why `folder` (an entry of the environments root) may go, or None to keep it."""
    m = _NAME.match(folder.name)
    if m is None or folder.is_symlink() or not folder.is_dir():
        return None  # not named as one of ours
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return "incomplete (no marker: a build that did not finish)"
    digest, project = marker.get("digest"), marker.get("project")
    if not isinstance(digest, str) or digest.removeprefix("sha256:")[:16] != m["digest"]:
        return "incomplete (its marker names another digest)"
    if not stale:
        return None
    source = root / project if isinstance(project, str) else None
    if source is None or not source.is_dir():
        return f"stale (its project {project!r} is not in this checkout)"
    if tree_digest(source) != digest:
        return f"stale ({project} no longer hashes to {digest})"
    return None


def sweep_environments(
    *, stale: bool = False, env_root: Path | None = None, root: Path | None = None
) -> list[str]:
    """Remove incomplete (and with `stale`, unusable) built environments: '<path>: <why>' each."""
    base = env_root or ENV_ROOT
    if not base.is_dir():
        return []
    checkout = root or project_root()
    removed: list[str] = []
    for folder in sorted(base.iterdir()):
        if folder.name == ".locks":
            continue
        with _locked(base / ".locks" / f"{folder.name}.lock", wait=False) as held:
            why = _removable(folder, checkout, stale) if held else None
            if why is not None:
                shutil.rmtree(folder)
                removed.append(f"{folder}: {why}")
    return removed
