"""Bad input in a swe-lite task set, found before any task is graded (`bench tasks check`).

`grade.check_tasks` answers "does the gold patch fix it?"; this module answers "is the task
well-formed?": every source's sdist checks out against its pinned sha256, both patches apply to
the pristine source, every FAIL_TO_PASS / PASS_TO_PASS id is collected by pytest, problem.md
gives away no line of the gold patch, task ids are unique, the recorded bucket is the one the
bucket rule gives, and the task says where it came from (its `[provenance]` table).

Each problem is a `TaskProblem` naming the task; `input_problems` returns them all, so one run
lists every mistake of a set, and the command turns a non-empty list into exit 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from runner.benchmarks.swe_lite.grade import Task, diff_stats, load_task
from runner.imagebuild.sources import SourceSpec, extract_source, fetch_source, load_sources

EASY_MAX_CHANGED = 12  # added + removed lines of gold.patch
EASY_MAX_F2P = 3
LEAK_MIN_CHARS = 12  # a gold line shorter than this (`return x`, `)`) is no give-away
COLLECT_TIMEOUT_S = 120

Bucket = Literal["easy", "hard"]
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class TaskProblem(BaseModel):
    """One thing wrong with one task (or with a source that tasks use)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    problem: str

    def render(self) -> str:
        return f"{self.task}: {self.problem}"


class Provenance(BaseModel):
    """Where a task's fix came from: task.toml's `[provenance]` table (issue 26)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # [older, newer] released versions; the task's source is the older one
    upstream_version_pair: tuple[_Text, _Text]
    changelog_line: _Text
    upstream_commit: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None
    license: _Text


# --------------------------------------------------------------------------------------------
# The bucket rule


def _changed_lines(patch_text: str) -> list[str]:
    return diff_stats(patch_text)[1]


def bucket_for(gold_patch_text: str, fail_to_pass_count: int) -> Bucket:
    """easy iff the fix touches one file, changes at most 12 lines (added + removed) and is
    checked by at most 3 FAIL_TO_PASS tests; hard otherwise."""
    touched, changed_lines = diff_stats(gold_patch_text)
    files, changed = len(touched), len(changed_lines)
    easy = files == 1 and changed <= EASY_MAX_CHANGED and fail_to_pass_count <= EASY_MAX_F2P
    return "easy" if easy else "hard"


# --------------------------------------------------------------------------------------------
# Checks on one task's files (no sources needed)


def _squash(text: str) -> str:
    return " ".join(text.split())


def leaked_lines(gold_patch_text: str, problem_text: str) -> list[str]:
    """Gold lines (added or removed, stripped, >= 12 characters) that problem.md contains;
    whitespace runs count as one space on both sides, so re-indenting hides nothing."""
    problem = _squash(problem_text)
    out: list[str] = []
    for line in _changed_lines(gold_patch_text):
        body = _squash(line[1:])
        if len(body) >= LEAK_MIN_CHARS and body in problem and body not in out:
            out.append(body)
    return out


def provenance_problems(task_dir: Path, source_version: str | None) -> list[str]:
    """task.toml's `[provenance]` table is present, well-formed, and starts at the source."""
    try:
        data = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeError, tomllib.TOMLDecodeError) as exc:
        return [f"task.toml unreadable: {exc}"]
    raw = data.get("provenance")
    if raw is None:
        return [
            "task.toml has no [provenance] table (upstream_version_pair, changelog_line, "
            "license, upstream_commit if known)"
        ]
    try:
        prov = Provenance.model_validate(raw)
    except ValidationError as exc:
        errs = "; ".join(
            f"provenance.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
        )
        return [f"task.toml {errs}"]
    if source_version is not None and prov.upstream_version_pair[0] != source_version:
        return [
            f"provenance.upstream_version_pair starts at {prov.upstream_version_pair[0]!r}, "
            f"but the task's source is version {source_version!r}"
        ]
    return []


def static_task_problems(task: Task) -> list[str]:
    """Bucket rule, problem.md leaks and provenance: what the task's own files can tell."""
    problems: list[str] = []
    gold = task.gold_patch.decode("utf-8", "replace")
    want = bucket_for(gold, len(task.fail_to_pass))
    if task.bucket != want:
        problems.append(
            f"bucket {task.bucket!r} recorded, the bucket rule gives {want!r} "
            f"({len(diff_stats(gold)[0])} file(s), {len(_changed_lines(gold))} changed "
            f"line(s), {len(task.fail_to_pass)} FAIL_TO_PASS)"
        )
    try:
        problem_text = task.problem
    except (OSError, UnicodeError) as exc:
        problems.append(f"problem.md unreadable: {exc}")
    else:
        for line in leaked_lines(gold, problem_text):
            problems.append(f"problem.md contains a line of gold.patch: {line!r}")
    problems += provenance_problems(task.dir, task.source.version)
    return problems


# --------------------------------------------------------------------------------------------
# Checks against the pristine source


def _patch(repo: Path, patch: bytes) -> str | None:
    """Apply `patch` (-p1, no fuzz) in `repo`; None when it applied, else patch's complaint."""
    proc = subprocess.run(
        [
            "patch",
            "-p1",
            "--batch",
            "--forward",
            "--no-backup-if-mismatch",
            "--fuzz=0",  # a task's own patches fit the pristine source exactly
            "--reject-file=-",
            "-d",
            str(repo),
        ],
        input=patch,
        capture_output=True,
    )
    if proc.returncode == 0:
        return None
    said = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip().splitlines()
    return " / ".join(said[-3:]) or f"exit {proc.returncode}"


def collected_ids(repo: Path, pythonpath: str, python: str, files: Sequence[str]) -> set[str]:
    """The pytest node ids collected from `files` in `repo`, as the grader runs pytest."""
    # pytest runs in `repo`: a relative interpreter path would point elsewhere there
    exe = os.path.abspath(python) if os.sep in python else shutil.which(python) or python
    proc = subprocess.run(
        [
            exe,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            *files,
        ],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo / pythonpath), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        timeout=COLLECT_TIMEOUT_S,
    )
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    return {line.strip() for line in lines if "::" in line and " " not in line.strip()}


def source_problems(task: Task, pristine: Path, python: str) -> list[str]:
    """Both patches apply to a copy of the pristine source; every test id is collected there
    (gold and tests applied, so a test of a name the fix adds still counts as collected)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="swelite-taskcheck-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(pristine / task.source.root, repo, symlinks=True)
        why = _patch(repo, task.gold_patch)
        if why is not None:
            problems.append(f"gold.patch does not apply to {task.source.ref}: {why}")
        why = _patch(repo, task.tests_patch)
        if why is not None:
            problems.append(f"tests.patch does not apply to {task.source.ref}: {why}")
            return problems
        ids = [*task.fail_to_pass, *task.pass_to_pass]
        files = sorted({t.split("::", 1)[0] for t in ids})
        try:
            got = collected_ids(repo, task.source.pythonpath, python, files)
        except subprocess.TimeoutExpired:
            return [*problems, f"collecting the tests took over {COLLECT_TIMEOUT_S} s"]
        missing = [t for t in ids if t not in got]
        if missing:
            problems.append(f"test ids not collected by pytest: {missing}")
    return problems


# --------------------------------------------------------------------------------------------
# A whole task set


def _declared_ids(tasks_root: Path) -> tuple[list[TaskProblem], list[Path]]:
    """Duplicate ids across the set's task.toml files, and the task folders."""
    seen: dict[str, Path] = {}
    problems: list[TaskProblem] = []
    dirs = sorted(p.parent for p in tasks_root.glob("*/task.toml"))
    for d in dirs:
        try:
            tid = tomllib.loads((d / "task.toml").read_text(encoding="utf-8")).get("id")
        except (OSError, UnicodeError, tomllib.TOMLDecodeError) as exc:
            problems.append(TaskProblem(task=d.name, problem=f"task.toml unreadable: {exc}"))
            continue
        if not isinstance(tid, str):
            continue  # load_task says what is wrong with it
        if tid in seen:
            problems.append(
                TaskProblem(
                    task=tid, problem=f"duplicate task id (folders {seen[tid].name} and {d.name})"
                )
            )
        else:
            seen[tid] = d
    return problems, dirs


def _load(d: Path, sources: dict[str, SourceSpec]) -> Task | TaskProblem:
    try:
        return load_task(d, sources)
    except KeyError as exc:
        return TaskProblem(task=d.name, problem=f"task.toml lacks key {exc}")
    except (ValueError, TypeError, OSError, UnicodeError, tomllib.TOMLDecodeError) as exc:
        return TaskProblem(task=d.name, problem=f"task.toml: {exc}")


def input_problems(tasks_root: Path, python: str, cache: Path | None = None) -> list[TaskProblem]:
    """Every bad-input problem of the task set at `tasks_root` (empty when it is well-formed).

    A manifest (`sources.toml`) that does not parse is one problem of the set itself, named
    `sources.toml`; then nothing else is checked.
    """
    try:
        sources = load_sources(tasks_root / "sources.toml")
    except (ValueError, TypeError, OSError, UnicodeError, tomllib.TOMLDecodeError) as exc:
        return [TaskProblem(task="sources.toml", problem=str(exc))]
    problems, dirs = _declared_ids(tasks_root)
    tasks: list[Task] = []
    for d in dirs:
        loaded = _load(d, sources)
        if isinstance(loaded, TaskProblem):
            problems.append(loaded)
        else:
            tasks.append(loaded)
    for task in tasks:
        problems += [TaskProblem(task=task.id, problem=p) for p in static_task_problems(task)]
    sdists: dict[str, Path] = {}
    for ref in sorted({t.source.ref for t in tasks}):
        try:
            sdists[ref] = fetch_source(sources[ref], cache)
        except (RuntimeError, OSError) as exc:
            problems += [
                TaskProblem(task=t.id, problem=f"source {ref} does not check out: {exc}")
                for t in tasks
                if t.source.ref == ref
            ]
    with tempfile.TemporaryDirectory(prefix="swelite-pristine-") as tmp:
        for path in sdists.values():
            extract_source(path, Path(tmp))
        for task in tasks:
            if task.source.ref in sdists:
                problems += [
                    TaskProblem(task=task.id, problem=p)
                    for p in source_problems(task, Path(tmp), python)
                ]
    return problems


__all__ = [
    "Provenance",
    "TaskProblem",
    "bucket_for",
    "input_problems",
    "leaked_lines",
    "provenance_problems",
    "source_problems",
    "static_task_problems",
]
