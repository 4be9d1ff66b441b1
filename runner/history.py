"""Find and run the evaluator that made a bundle, from this repository's git history.

A published bundle names its `evaluator_digest`: the NAR SHA-256 of the evaluator's declared inputs
(runner/evaluator/core/inputs.py). Every commit's inputs can be hashed the same way (its own
`evaluator-inputs.json` over `git archive` of the paths it declares), so the commit whose inputs
hash to the bundle's digest holds exactly the evaluator that made it. That evaluator is then run
from a temporary export of the commit (a detached working tree; the repository's own checkout and
`.git` are never touched), in this interpreter when the commit's uv.lock equals ours, else through
`uv run --project` with its own locked environment.

Needs git, so it lives beside orchestrate.py and not under runner/evaluator (which never runs
programs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import DECLARATION, ROOT_ENV, evaluator_digest, project_root


def _git(repo: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise InputError(f"git {' '.join(args[:2])}: {why[0]}", file=str(repo))
    return proc.stdout


def repository(root: Path) -> Path:
    """The git work tree holding `root`, or an InputError (an installed bench has no history)."""
    if shutil.which("git") is None:
        raise InputError("git is not installed: the evaluator history needs it")
    proc = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise InputError(
            f"{root} is not a git checkout: finding an older evaluator needs the repository's "
            "history (clone it, not a shallow copy)"
        )
    return Path(proc.stdout.strip())


def _declared_paths(repo: Path, commit: str) -> list[str] | None:
    try:
        raw = parse_json(_git(repo, "show", f"{commit}:{DECLARATION}"))
    except (InputError, ValueError):
        return None
    paths = raw.get("paths") if isinstance(raw, dict) else None
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else None


def _export(repo: Path, commit: str, dest: Path, paths: Sequence[str] = ()) -> None:
    """`git archive COMMIT [-- PATHS]` unpacked into `dest` (modes and symlinks kept)."""
    archive = subprocess.Popen(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "--", *paths],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert archive.stdout is not None
    untar = subprocess.run(
        ["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True, check=False
    )
    archive.stdout.close()
    _, git_err = archive.communicate()
    if archive.wait() != 0 or untar.returncode != 0:
        why = (git_err or untar.stderr).decode("utf-8", "replace").strip()
        raise InputError(f"cannot export {commit[:12]}: {why}", file=str(repo))


def digest_at(repo: Path, commit: str) -> str | None:
    """`evaluator_digest` of a commit's tree (its own declaration), or None without one."""
    paths = _declared_paths(repo, commit)
    if paths is None:
        return None
    with tempfile.TemporaryDirectory(prefix="afb-digest-") as tmp:
        try:
            _export(repo, commit, Path(tmp), paths)
            return evaluator_digest(Path(tmp))
        except InputError:
            return None  # a commit whose declaration names missing paths made no evaluator


def _candidates(repo: Path) -> list[str]:
    """Commits that changed an evaluator input, newest first. The pathspec is the union of the
    paths every version of the declaration named, so an input later renamed is still seen."""
    changed_decl = _git(repo, "log", "--format=%H", "HEAD", "--", DECLARATION).decode().split()
    paths = {DECLARATION}
    for c in changed_decl:
        paths.update(_declared_paths(repo, c) or ())
    return _git(repo, "log", "--format=%H", "HEAD", "--", *sorted(paths)).decode().split()


@dataclass(frozen=True)
class Found:
    commit: str
    digest: str
    examined: int


def find_evaluator(repo: Path, digest: str) -> Found:
    """The newest commit whose evaluator inputs hash to `digest` (an InputError if none)."""
    examined = 0
    for commit in _candidates(repo):
        examined += 1
        if digest_at(repo, commit) == digest:
            return Found(commit, digest, examined)
    raise InputError(
        f"no commit in {repo}'s history (HEAD and its ancestors; {examined} commits changed an "
        f"evaluator input) has evaluator inputs hashing to {digest}"
    )


@contextmanager
def exported_tree(repo: Path, commit: str) -> Iterator[Path]:
    """A temporary detached working tree of `commit`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"afb-eval-{commit[:12]}-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        _export(repo, commit, tree)
        yield tree


def _entry_point(tree: Path) -> tuple[str, str]:
    conf = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    target = conf.get("project", {}).get("scripts", {}).get("bench")
    if not isinstance(target, str) or ":" not in target:
        raise InputError("the commit's pyproject.toml declares no `bench` script", key="bench")
    module, func = target.split(":", 1)
    return module, func


def uv_binary(root: Path) -> str | None:
    for cand in (os.environ.get("AFB_UV"), shutil.which("uv"), str(root / ".tools/bin/uv")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def bench_command(tree: Path, repo: Path) -> tuple[list[str], dict[str, str]]:
    """argv prefix and environment that run the exported tree's own `bench`."""
    module, func = _entry_point(tree)
    env = {k: v for k, v in os.environ.items() if k not in (ROOT_ENV, "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(tree)  # before site-packages: the tree's `runner`, not ours
    code = f"import sys; from {module} import {func} as m; sys.argv[0] = 'bench'; sys.exit(m())"
    if (tree / "uv.lock").read_bytes() == (repo / "uv.lock").read_bytes():
        return [sys.executable, "-c", code], env
    uv = uv_binary(repo)
    if uv is None:
        raise InputError(
            "that evaluator locked other dependencies (uv.lock differs) and uv is not installed "
            "(set AFB_UV or put uv on PATH)"
        )
    env["UV_PROJECT_ENVIRONMENT"] = str(tree.parent / "venv")
    prefix = [uv, "run", "--quiet", "--frozen", "--no-dev", "--project", str(tree)]
    return [*prefix, "--python", sys.executable, "python", "-c", code], env


@dataclass(frozen=True)
class HistoricRun:
    found: Found
    returncode: int
    stdout: str
    stderr: str


def knows_option(tree: Path, option: str) -> bool:
    """Does the exported tree's CLI declare `option` (e.g. `--allow-unsigned`)?"""
    cli = tree / "runner" / "cli"
    return any(f'"{option}"' in p.read_text(encoding="utf-8") for p in sorted(cli.glob("*.py")))


def run_historic_bench(
    repo: Path, digest: str, args: Sequence[str], *, if_known: Sequence[str] = ()
) -> HistoricRun:
    """Run `bench ARGS` with the evaluator whose inputs hash to `digest` (paths made absolute
    by the caller), checking first that the exported tree really has that digest. Each option
    of `if_known` is added when that tree's CLI has it (options later versions added)."""
    found = find_evaluator(repo, digest)
    with exported_tree(repo, found.commit) as tree:
        if evaluator_digest(tree) != digest:  # the full export must agree with the selection
            raise InputError(f"the export of {found.commit[:12]} does not hash to {digest}")
        argv, env = bench_command(tree, repo)
        extra = [o for o in if_known if knows_option(tree, o)]
        proc = subprocess.run(
            [*argv, *args, *extra], cwd=tree, env=env, capture_output=True, text=True, check=False
        )
    return HistoricRun(found, proc.returncode, proc.stdout, proc.stderr)


def unsigned_copy(bundle: Path, into: Path) -> Path:
    """The bundle without its signatures/, for an evaluator that predates signing."""
    from runner.evaluator.trust.run import SIGNATURES

    copy = into / bundle.name
    shutil.copytree(bundle, copy, symlinks=True,
                    ignore=lambda d, names: [SIGNATURES] if Path(d) == bundle else [])  # fmt: skip
    return copy


def reproduce_with_own_evaluator(repo: Path | None, bundle: Path, digest: str) -> HistoricRun:
    """`bench reproduce` of the bundle by the evaluator whose inputs hash to `digest` (its own),
    on an unsigned copy: the signatures are this checkout's to check, against its trusted keys
    (an older evaluator may predate the key that signed the bundle). What `bench reproduce
    --evaluator-from-history` and `bench keys sign` of an older bundle both run. `repo`: the
    repository whose history is searched (None: the one holding this checkout)."""
    if repo is None:
        repo = repository(project_root())
    with tempfile.TemporaryDirectory(prefix="afb-reproduce-") as tmp:
        copy = unsigned_copy(bundle.resolve(), Path(tmp))
        return run_historic_bench(
            repo, digest, ["reproduce", str(copy)], if_known=["--allow-unsigned"]
        )


def reproduced(ran: HistoricRun) -> bool:
    """Did a historic `bench reproduce` say REPRODUCED (exit 0)?"""
    return ran.returncode == 0 and "REPRODUCED" in ran.stdout
