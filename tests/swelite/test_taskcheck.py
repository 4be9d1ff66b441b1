"""`bench tasks check` refuses bad input (issue 26): each check of `taskcheck` on a tiny,
well-formed task set built here (no registry: a stand-in pip hands out the local sdist), then
the same set with one planted mistake, which must fail for its own reason and no other."""

from __future__ import annotations

import difflib
import hashlib
import io
import os
import re
import shutil
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from runner.benchmarks.swe_lite.grade import load_task, static_problems
from runner.benchmarks.swe_lite.taskcheck import (
    TaskProblem,
    bucket_for,
    input_problems,
    leaked_lines,
)
from runner.cli.main import app

ROOT = "mini-1.0"
CORE = "def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n"
FIXED = CORE.replace("a - b", "a + b")
TESTS = "from mini.core import add, neg\n\n\ndef test_neg():\n    assert neg(2) == -2\n"
NEW_TESTS = TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
PROBLEM = """# `add()` subtracts

`mini.core.add(2, 3)` gives `-1`, while the docstring-free name promises a sum:

```python
>>> from mini.core import add
>>> add(2, 3)
-1
```

Expected `5`: adding two numbers should add them.
"""
TASK_TOML = """id = "mini-add"
project = "mini"
source = "mini==1.0"
bucket = "easy"
summary = "add() subtracts"
fail_to_pass = ["tests/test_core.py::test_add"]
pass_to_pass = ["tests/test_core.py::test_neg"]

[provenance]
upstream_version_pair = ["1.0", "1.1"]
changelog_line = "Fixed add() to add"
license = "MIT"
upstream_commit = "0123abc"
"""


def _diff(path: str, old: str, new: str, context: int = 3) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
            n=context,
        )
    )


def _sdist(dest: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        files = {"mini/__init__.py": "", "mini/core.py": CORE, "tests/test_core.py": TESTS}
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{ROOT}/{name}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    dest.write_bytes(buf.getvalue())
    return buf.getvalue()


@pytest.fixture
def task_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A well-formed one-task set; AFB_PIP is a stand-in that 'downloads' the local sdist."""
    sdist = tmp_path / "upstream" / "mini-1.0.tar.gz"
    sdist.parent.mkdir()
    digest = hashlib.sha256(_sdist(sdist)).hexdigest()
    fake_pip = tmp_path / "fake_pip.py"
    fake_pip.write_text(
        f"import shutil, sys\nshutil.copy({str(sdist)!r}, sys.argv[sys.argv.index('-d') + 1])\n"
    )
    monkeypatch.setenv("AFB_PIP", f"{sys.executable} {fake_pip}")
    monkeypatch.setenv("AFB_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "set"
    (root / "mini-add").mkdir(parents=True)
    (root / "sources.toml").write_text(
        '[[source]]\nref = "mini==1.0"\nname = "mini"\nversion = "1.0"\n'
        f'filename = "mini-1.0.tar.gz"\nsha256 = "{digest}"\nroot = "{ROOT}"\n'
    )
    task = root / "mini-add"
    (task / "task.toml").write_text(TASK_TOML)
    (task / "problem.md").write_text(PROBLEM)
    (task / "gold.patch").write_text(_diff("mini/core.py", CORE, FIXED))
    (task / "tests.patch").write_text(_diff("tests/test_core.py", TESTS, NEW_TESTS))
    return root


def problems_of(root: Path) -> list[TaskProblem]:
    return input_problems(root, sys.executable)


def edit(path: Path, fn: Callable[[str], str]) -> None:
    path.write_text(fn(path.read_text()))


def test_well_formed_set_has_no_problem(task_set: Path) -> None:
    assert problems_of(task_set) == []


def only(problems: list[TaskProblem], *fragments: str) -> TaskProblem:
    """The single problem, naming the task and saying each fragment."""
    assert len(problems) == 1, [p.render() for p in problems]
    prob = problems[0]
    assert prob.task == "mini-add", prob
    for frag in fragments:
        assert frag in prob.problem, prob.problem
    return prob


def test_sdist_hash_mismatch(task_set: Path) -> None:
    edit(
        task_set / "sources.toml", lambda s: re.sub(r'sha256 = "\w+"', f'sha256 = "{"0" * 64}"', s)
    )
    only(problems_of(task_set), "source mini==1.0 does not check out", "sha256 mismatch")


def test_gold_patch_does_not_apply(task_set: Path) -> None:
    edit(
        task_set / "mini-add" / "gold.patch",
        lambda s: s.replace("-    return a - b", "-    return a * b"),
    )
    only(problems_of(task_set), "gold.patch does not apply to mini==1.0")


def test_tests_patch_does_not_apply(task_set: Path) -> None:
    edit(
        task_set / "mini-add" / "tests.patch", lambda s: s.replace(" def test_neg", " def test_pos")
    )
    only(problems_of(task_set), "tests.patch does not apply to mini==1.0")


@pytest.mark.parametrize("key", ["fail_to_pass", "pass_to_pass"])
def test_test_id_not_collected(task_set: Path, key: str) -> None:
    wrong = "tests/test_core.py::test_nothing_by_this_name"
    edit(
        task_set / "mini-add" / "task.toml",
        lambda s: s.replace(f'{key} = ["', f'{key} = ["{wrong}", "'),
    )
    only(problems_of(task_set), "not collected", wrong)


def test_problem_statement_with_a_gold_line(task_set: Path) -> None:
    # re-indented and inside a sentence: still the gold line `return a + b` (12 characters)
    edit(
        task_set / "mini-add" / "problem.md", lambda s: s + "\nMaybe    return a + b   would do.\n"
    )
    only(problems_of(task_set), "problem.md contains a line of gold.patch", "'return a + b'")


def test_short_gold_lines_are_no_leak() -> None:
    gold = _diff("m.py", "x = 1\nreturn a - b\n", "x = 2\nreturn a + b\n")
    assert leaked_lines(gold, "x = 1 and x = 2 are fine; `return a - b` is not") == ["return a - b"]
    assert leaked_lines(gold, "return a +b") == []


def test_duplicate_task_id(task_set: Path) -> None:
    shutil.copytree(task_set / "mini-add", task_set / "mini-add-copy")
    probs = problems_of(task_set)
    dup = [p for p in probs if "duplicate task id" in p.problem]
    assert len(dup) == 1 and dup[0].task == "mini-add"
    assert "mini-add-copy" in dup[0].problem
    # the copy's folder name disagrees with its id as well; nothing else is wrong
    rest = [p for p in probs if p not in dup]
    assert [p.task for p in rest] == ["mini-add-copy"] and "directory name" in rest[0].problem


def test_bucket_not_the_rule(task_set: Path) -> None:
    edit(task_set / "mini-add" / "task.toml", lambda s: s.replace('"easy"', '"hard"'))
    only(problems_of(task_set), "bucket 'hard' recorded, the bucket rule gives 'easy'")
    # bucket_for is the one rule: grade's own static checks say nothing of the bucket
    assert static_problems(load_task(task_set / "mini-add")) == []


def test_bucket_is_not_the_old_hunk_rule(task_set: Path) -> None:
    """Two hunks in one file, 4 changed lines, 1 FAIL_TO_PASS: easy by bucket_for (the old
    grade.py rule, hard = multi-hunk or multi-file, called this hard); so `hard` is refused."""
    two_hunks = _diff("mini/core.py", CORE, FIXED.replace("return -a", "return 0 - a"), context=1)
    assert two_hunks.count("\n@@ ") == 2
    (task_set / "mini-add" / "gold.patch").write_text(two_hunks)
    assert problems_of(task_set) == []
    assert static_problems(load_task(task_set / "mini-add")) == []
    edit(task_set / "mini-add" / "task.toml", lambda s: s.replace('"easy"', '"hard"'))
    only(problems_of(task_set), "bucket 'hard' recorded, the bucket rule gives 'easy'")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda s: s.split("[provenance]")[0], "no [provenance] table"),
        (lambda s: s.replace('license = "MIT"\n', ""), "provenance.license"),
        (lambda s: s.replace('"0123abc"', '"not-a-commit"'), "provenance.upstream_commit"),
        (lambda s: s + 'notes = "x"\n', "provenance.notes"),
        (lambda s: s.replace('["1.0", "1.1"]', '["0.9", "1.0"]'), "source is version '1.0'"),
    ],
    ids=["missing", "no-license", "bad-commit", "extra-key", "wrong-version"],
)
def test_provenance(task_set: Path, change: Callable[[str], str], fragment: str) -> None:
    edit(task_set / "mini-add" / "task.toml", change)
    only(problems_of(task_set), fragment)


def test_cli_exit_2_names_task_and_problem(task_set: Path) -> None:
    edit(task_set / "mini-add" / "task.toml", lambda s: s.replace('"easy"', '"hard"'))
    res = CliRunner().invoke(app, ["tasks", "check", str(task_set), "--python", sys.executable])
    assert res.exit_code == 2, res.output
    assert "mini-add: bucket 'hard' recorded" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_cli_green_on_a_good_set(task_set: Path, relative: bool) -> None:
    """Green end to end, also with `--python` relative to the working directory (the tests
    run in scratch copies elsewhere)."""
    python = os.path.relpath(sys.executable) if relative else sys.executable
    res = CliRunner().invoke(app, ["tasks", "check", str(task_set), "--python", python])
    assert res.exit_code == 0, res.output
    assert "ok   mini-add" in res.output


# --- the bucket rule ------------------------------------------------------------------------


def _gold(files: int, changed: int) -> str:
    """A diff over `files` files with `changed` changed lines in all (at least one per file)."""
    out = []
    per = [changed // files + (i < changed % files) for i in range(files)]
    for i, n in enumerate(per):
        old = "".join(f"line {j}\n" for j in range(n))
        out.append(_diff(f"pkg/m{i}.py", old, ""))
    return "".join(out)


@pytest.mark.parametrize(
    ("files", "changed", "f2p", "want"),
    [
        (1, 1, 1, "easy"),
        (1, 12, 3, "easy"),
        (1, 13, 1, "hard"),
        (1, 2, 4, "hard"),
        (2, 2, 1, "hard"),
    ],
)
def test_bucket_for_bounds(files: int, changed: int, f2p: int, want: str) -> None:
    assert bucket_for(_gold(files, changed), f2p) == want


def test_bucket_for_counts_lines_not_headers() -> None:
    # "--- a/..." and "+++ b/..." are headers; a removed line "-- x" is a change
    gold = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,1 @@\n--- x\n-y\n+z\n"
    assert bucket_for(gold, 1) == "easy"
    eleven = "".join(f"+l{i}\n" for i in range(11))
    assert bucket_for(gold.replace("+1,1 @@", "+1,12 @@") + eleven, 1) == "hard"  # 14 lines
    assert bucket_for(gold.replace("+1,1 @@", "+1,10 @@") + eleven[:-5], 1) == "easy"  # 12


def test_bucket_for_deleted_and_new_files() -> None:
    gone = "--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    new = "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
    assert bucket_for(gone, 1) == bucket_for(new, 1) == "easy"
    assert bucket_for(gone + new, 1) == "hard"


@given(st.integers(1, 3), st.integers(3, 30), st.integers(1, 6), st.integers(0, 5))
def test_bucket_for_monotone(files: int, changed: int, f2p: int, more: int) -> None:
    """More changed lines, files or FAIL_TO_PASS tests never make a task easier."""
    order = {"easy": 0, "hard": 1}
    base = order[bucket_for(_gold(files, changed), f2p)]
    assert order[bucket_for(_gold(files, changed + more), f2p)] >= base
    assert order[bucket_for(_gold(files, changed), f2p + more)] >= base
    assert order[bucket_for(_gold(min(files + 1, changed), changed), f2p)] >= base


# --- the task pools authored for issue 26 -------------------------------------------------

POOLS = sorted(
    p.parent
    for p in (Path(__file__).resolve().parents[2] / "specs").glob("swe-pool-*/sources.toml")
)


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.name)
def test_pool_static(pool: Path) -> None:
    """Without sources: every pool task loads, passes grade's shape checks and taskcheck's
    (bucket rule, no gold line in problem.md, provenance), and uses only stdlib + pytest."""
    from runner.benchmarks.swe_lite.grade import load_tasks
    from runner.benchmarks.swe_lite.taskcheck import static_task_problems

    tasks = load_tasks(pool)
    assert tasks
    for task in tasks:
        assert static_problems(task) == [], task.id
        assert static_task_problems(task) == [], task.id
        assert task.project == task.source.name
        added = task.tests_patch.decode()
        assert "hypothesis" not in added and "pretend" not in added, task.id
