"""Grading of swe-lite tasks through an exec function, SWE-bench style.

The grader only needs ``exec_fn(argv, stdin) -> (exit_code, stdout, stderr)`` that runs a
command where the pristine task sources live (``/opt/swe-lite/src`` inside the sandbox
image, or a directory of extracted sdists on the host). It never imports podman-py, so the
same code grades inside a container (``podman_exec``) and on the host (``local_exec``).

One grading run, all inside a fresh scratch copy of the pristine sources:
1. apply the candidate patch (``patch -p1``);
2. restore every file the task's ``tests.patch`` touches to pristine (so a candidate cannot
   pre-empt or tamper with the hidden tests), then apply ``tests.patch``;
3. run the FAIL_TO_PASS and PASS_TO_PASS test ids with pytest and read each test's outcome
   from the ``-rA`` summary; a test with no PASSED line counts as failed.

``resolved`` is true iff the patch applied and every FAIL_TO_PASS and PASS_TO_PASS test passed.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runner.imagebuild.sources import SourceSpec, extract_source, fetch_sources, load_sources

ExecFn = Callable[[Sequence[str], bytes], tuple[int, bytes, bytes]]

SANDBOX_SRC_ROOT = "/opt/swe-lite/src"
DEFAULT_TIMEOUT_S = 300
_TEST_PATH = re.compile(r"(^|/)tests?/|(^|/)test_[^/]*\.py$|(^|/)conftest\.py$")
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)")
_SUCCESS = {"PASSED", "XFAIL"}
_SUBFAIL = re.compile(r"^SUB(FAIL|ERROR)")
_TASK_ID = re.compile(r"[a-z0-9][a-z0-9.-]*")


@dataclasses.dataclass(frozen=True)
class Task:
    """One swe-lite task directory (``task.toml``, ``problem.md``, both patches)."""

    id: str
    project: str
    source: SourceSpec
    bucket: str
    summary: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    dir: Path

    @property
    def problem(self) -> str:
        return (self.dir / "problem.md").read_text(encoding="utf-8")

    @property
    def gold_patch(self) -> bytes:
        return (self.dir / "gold.patch").read_bytes()

    @property
    def tests_patch(self) -> bytes:
        return (self.dir / "tests.patch").read_bytes()


def load_task(task_dir: Path, sources: dict[str, SourceSpec] | None = None) -> Task:
    """Load and validate a task; its source ref resolves in ``../sources.toml``."""
    task_dir = Path(task_dir)
    data = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    if sources is None:
        sources = load_sources(task_dir.parent / "sources.toml")
    tid = data["id"]
    if tid != task_dir.name or not _TASK_ID.fullmatch(tid):
        raise ValueError(f"{task_dir}: id {tid!r} must match the directory name")
    if data["bucket"] not in ("easy", "hard"):
        raise ValueError(f"{tid}: bucket must be 'easy' or 'hard'")
    if data["source"] not in sources:
        raise ValueError(f"{tid}: unknown source {data['source']!r}")
    f2p, p2p = tuple(data["fail_to_pass"]), tuple(data["pass_to_pass"])
    if not f2p or not p2p or set(f2p) & set(p2p) or any(" " in t for t in f2p + p2p):
        raise ValueError(f"{tid}: need disjoint, non-empty test id lists without spaces")
    return Task(
        id=tid,
        project=data["project"],
        source=sources[data["source"]],
        bucket=data["bucket"],
        summary=data.get("summary", ""),
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        dir=task_dir,
    )


def load_tasks(tasks_root: Path) -> list[Task]:
    """All tasks under ``tasks_root`` (each subdirectory with a ``task.toml``), sorted by id."""
    tasks_root = Path(tasks_root)
    sources = load_sources(tasks_root / "sources.toml")
    dirs = sorted(p.parent for p in tasks_root.glob("*/task.toml"))
    return [load_task(d, sources) for d in dirs]


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _header_path(line: str) -> str | None:
    path = line[4:].split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    return path.split("/", 1)[1] if "/" in path else path  # -p1


def diff_stats(patch_text: str) -> tuple[list[str], list[str]]:
    """(files touched, added and removed lines) of a unified diff. Hunk line counts are
    followed, so a removed line reading "-- x" is a change, not a `---` file header."""
    files: list[str] = []
    changed: list[str] = []
    old = new = 0
    minus: str | None = None
    for line in patch_text.splitlines():
        if old > 0 or new > 0:
            if line.startswith("-"):
                old -= 1
                changed.append(line)
            elif line.startswith("+"):
                new -= 1
                changed.append(line)
            elif not line.startswith("\\"):  # "\ No newline at end of file"
                old, new = old - 1, new - 1
            continue
        m = _HUNK.match(line)
        if m:
            old, new = (int(n) if n is not None else 1 for n in m.groups())
        elif line.startswith("--- "):
            minus = _header_path(line)
        elif line.startswith("+++ "):
            path = _header_path(line)
            path = minus if path is None else path  # a deleted file: +++ /dev/null
            if path is not None and path not in files:
                files.append(path)
    return files, changed


def patch_files(patch: bytes) -> list[str]:
    """Paths (``-p1``) a unified diff creates, modifies or deletes, in order of appearance."""
    return diff_stats(patch.decode("utf-8", "replace"))[0]


def is_test_path(path: str) -> bool:
    return bool(_TEST_PATH.search(path))


@dataclasses.dataclass
class GradeReport:
    """Per-test outcome of one grading run (keys as in SWE-bench's reports)."""

    task_id: str
    patch_applied: bool
    resolved: bool
    fail_to_pass: dict[str, list[str]]
    pass_to_pass: dict[str, list[str]]
    statuses: dict[str, str]
    log: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "patch_applied": self.patch_applied,
            "resolved": self.resolved,
            "FAIL_TO_PASS": self.fail_to_pass,
            "PASS_TO_PASS": self.pass_to_pass,
            "statuses": self.statuses,
        }


def parse_pytest_summary(output: str) -> dict[str, str]:
    """``{nodeid: status}`` from pytest ``-rA`` output; a failure outranks a pass."""
    statuses: dict[str, str] = {}
    for line in output.splitlines():
        if _SUBFAIL.match(line):
            # pytest >= 9 reports failed unittest subTests as "SUBFAILED(<desc>) <nodeid>"
            # next to a "PASSED <nodeid>" line for the test itself.
            for tok in line.split():
                if "::" in tok:
                    statuses[tok] = "FAILED"
            continue
        m = _SUMMARY.match(line)
        if not m:
            continue
        status, nodeid = m.groups()
        if statuses.get(nodeid) in (None, "PASSED", "XFAIL") or status not in _SUCCESS:
            statuses[nodeid] = status
    return statuses


_SETUP = r"""set -eu
src=$1; shift
work=$(mktemp -d /tmp/afb-grade.XXXXXX)
cp -a "$src" "$work/repo"
printf '%s\n' "$work"
"""

_APPLY = r"""set -eu
repo=$1; shift
if [ "$1" = skip ]; then exit 0; fi
exec patch -p1 --batch --forward --no-backup-if-mismatch --reject-file=- -d "$repo"
"""

_APPLY_TESTS = r"""set -eu
src=$1; repo=$2; shift 2
for f in "$@"; do
  if [ -e "$src/$f" ]; then mkdir -p "$(dirname "$repo/$f")"; cp -a "$src/$f" "$repo/$f";
  else rm -f "$repo/$f"; fi
done
exec patch -p1 --batch --forward --no-backup-if-mismatch --reject-file=- -d "$repo"
"""

_RUN = r"""repo=$1; pypath=$2; py=$3; timeout_s=$4; shift 4
cd "$repo" || exit 90
PYTHONPATH="$repo/$pypath" PYTHONDONTWRITEBYTECODE=1 exec timeout "$timeout_s" \
  "$py" -m pytest -p no:cacheprovider -rA --tb=short -q --no-header -o addopts= "$@"
"""


def _sh(
    exec_fn: ExecFn, script: str, args: Sequence[str], stdin: bytes = b""
) -> tuple[int, bytes, bytes]:
    return exec_fn(["sh", "-c", script, "sh", *args], stdin)


def grade(
    exec_fn: ExecFn,
    task: Task,
    candidate_patch: bytes,
    *,
    src_root: str = SANDBOX_SRC_ROOT,
    python: str = "python3",
    timeout_s: int = DEFAULT_TIMEOUT_S,
) -> GradeReport:
    """Grade ``candidate_patch`` for ``task`` where ``exec_fn`` runs (see module doc)."""
    src = f"{src_root}/{task.source.root}"
    log: list[str] = []
    rc, out, err = _sh(exec_fn, _SETUP, [src])
    if rc != 0:
        raise RuntimeError(f"grading setup failed ({rc}): {err.decode(errors='replace')}")
    work = out.decode().strip().splitlines()[-1]
    repo = f"{work}/repo"
    try:
        empty = not candidate_patch.strip()
        rc, out, err = _sh(exec_fn, _APPLY, [repo, "skip" if empty else "apply"], candidate_patch)
        log.append(f"$ patch (candidate) -> {rc}\n{out.decode(errors='replace')}")
        applied = rc == 0
        statuses: dict[str, str] = {}
        if applied:
            test_files = patch_files(task.tests_patch)
            rc, out, err = _sh(exec_fn, _APPLY_TESTS, [src, repo, *test_files], task.tests_patch)
            if rc != 0:
                raise RuntimeError(
                    f"{task.id}: tests.patch did not apply: {(out + err).decode(errors='replace')}"
                )
            ids = [*task.fail_to_pass, *task.pass_to_pass]
            rc, out, err = _sh(
                exec_fn, _RUN, [repo, task.source.pythonpath, python, str(timeout_s), *ids]
            )
            text = out.decode(errors="replace")
            log.append(f"$ pytest -> {rc}\n{text}\n{err.decode(errors='replace')}")
            statuses = parse_pytest_summary(text)
    finally:
        _sh(exec_fn, 'rm -rf -- "$1"', [work])

    def split(ids: Sequence[str]) -> dict[str, list[str]]:
        ok = [t for t in ids if statuses.get(t) in _SUCCESS]
        return {"success": ok, "failure": [t for t in ids if t not in ok]}

    f2p, p2p = split(task.fail_to_pass), split(task.pass_to_pass)
    return GradeReport(
        task_id=task.id,
        patch_applied=applied,
        resolved=applied and not f2p["failure"] and not p2p["failure"],
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        statuses=statuses,
        log="\n".join(log),
    )


# --------------------------------------------------------------------------------------------
# Exec functions


def local_exec(argv: Sequence[str], stdin: bytes) -> tuple[int, bytes, bytes]:
    """Run on the host (for checking tasks and for tests)."""
    proc = subprocess.run(list(argv), input=stdin, capture_output=True)
    return proc.returncode, proc.stdout, proc.stderr


def podman_exec(container: str, podman: str = "podman") -> ExecFn:
    """An exec function running in ``container`` through the podman CLI."""

    def run(argv: Sequence[str], stdin: bytes) -> tuple[int, bytes, bytes]:
        proc = subprocess.run(
            [podman, "exec", "-i", container, *argv], input=stdin, capture_output=True
        )
        return proc.returncode, proc.stdout, proc.stderr

    return run


# --------------------------------------------------------------------------------------------
# Task checker


@dataclasses.dataclass
class TaskCheck:
    task_id: str
    problems: list[str]
    gold: GradeReport | None = None
    empty: GradeReport | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def static_problems(task: Task) -> list[str]:
    """Checks that need no test run: patch shapes and problem statement. The bucket rule is
    taskcheck.bucket_for's (`bench tasks check`); grading does not depend on a task's bucket."""
    problems = []
    gold, tests = task.gold_patch, task.tests_patch
    gold_files, test_files = patch_files(gold), patch_files(tests)
    if not gold_files:
        problems.append("gold.patch touches no file")
    if not test_files:
        problems.append("tests.patch touches no file")
    problems += [f"gold.patch touches test file {f}" for f in gold_files if is_test_path(f)]
    problems += [
        f"tests.patch touches non-test file {f}" for f in test_files if not is_test_path(f)
    ]
    if len(task.problem.strip()) < 80:
        problems.append("problem.md is missing or too short")
    return problems


def check_task(task: Task, exec_fn: ExecFn, src_root: str, python: str = "python3") -> TaskCheck:
    """Verify: F2P fail and P2P pass without a fix; everything passes with gold.patch."""
    chk = TaskCheck(task.id, static_problems(task))
    chk.empty = grade(exec_fn, task, b"", src_root=src_root, python=python)
    chk.gold = grade(exec_fn, task, task.gold_patch, src_root=src_root, python=python)
    e, g = chk.empty, chk.gold
    if e.fail_to_pass["success"]:
        chk.problems.append(f"FAIL_TO_PASS pass without the fix: {e.fail_to_pass['success']}")
    if e.pass_to_pass["failure"]:
        chk.problems.append(f"PASS_TO_PASS fail without the fix: {e.pass_to_pass['failure']}")
    if not g.patch_applied:
        chk.problems.append("gold.patch does not apply")
    elif not g.resolved:
        chk.problems.append(
            f"gold.patch does not resolve: F2P failures {g.fail_to_pass['failure']}, "
            f"P2P failures {g.pass_to_pass['failure']}"
        )
    return chk


def check_tasks(
    tasks_root: Path, python: str = sys.executable, cache: Path | None = None
) -> list[TaskCheck]:
    """Check every task on the host against freshly extracted pristine sources."""
    tasks = load_tasks(tasks_root)
    sdists = fetch_sources(tasks_root / "sources.toml", {t.source.ref for t in tasks}, cache)
    with tempfile.TemporaryDirectory(prefix="swelite-src-") as tmp:
        for path in sdists.values():
            extract_source(path, Path(tmp))
        return [check_task(t, local_exec, tmp, python) for t in tasks]


__all__ = [
    "ExecFn",
    "GradeReport",
    "Task",
    "check_task",
    "check_tasks",
    "diff_stats",
    "grade",
    "load_task",
    "load_tasks",
    "local_exec",
    "parse_pytest_summary",
    "patch_files",
    "podman_exec",
]
