"""The derived views are checked (issue 29): `bench verify` and `bench reproduce` re-render
report.html and junit.xml from the run directory and compare them byte for byte; rendering is
deterministic (the same run, copied to another path, renders the same bytes); and what
`reproduce` prints says exactly what was checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner.report import write_junit, write_report
from runner.report.check import rendered, view_problems
from tests.foundation.helpers import bench
from tests.hardening.runs import evaluated


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = evaluated(tmp_path_factory.mktemp("views") / "run").run_dir
    write_report(run)
    write_junit(run)
    return run


def test_rendering_is_deterministic_across_paths_and_runs(pristine: Path, tmp_path: Path) -> None:
    other = shutil.copytree(pristine, tmp_path / "elsewhere" / "renamed")
    for name in ("report.html", "junit.xml"):
        here, again, there = (
            rendered(pristine, name),
            rendered(pristine, name),
            rendered(other, name),
        )
        assert here == again == there
        assert (pristine / "results" / name).stat().st_size == here[1]
    assert view_problems(pristine) == [] and view_problems(other) == []


@pytest.mark.parametrize("name", ["report.html", "junit.xml"])
@pytest.mark.parametrize("edit", ["same size", "appended", "emptied"])
def test_an_edited_view_fails_verify_and_reproduce(
    pristine: Path, tmp_path: Path, name: str, edit: str
) -> None:
    run = shutil.copytree(pristine, tmp_path / "run")
    assert bench("verify", run).exit_code == 0  # negative control
    path = run / "results" / name
    data = path.read_bytes()
    if edit == "same size":
        i = data.index(b"COMPLETED") if b"COMPLETED" in data else len(data) // 2
        data = data[:i] + (b"X" if data[i : i + 1] != b"X" else b"Y") + data[i + 1 :]
    elif edit == "appended":
        data += b"<!-- 100% -->"
    else:
        data = b""
    path.write_bytes(data)
    for argv in (["verify", run], ["verify", run, "--allow-unsigned"], ["reproduce", run],
                 ["reproduce", run, "--allow-unsigned"]):  # fmt: skip
        res = bench(*argv)
        assert res.exit_code == 3, res.output
        assert f"results/{name}: differs from what the run directory renders" in res.output


def test_an_absent_view_is_no_problem_and_reproduce_says_what_it_checked(
    pristine: Path, tmp_path: Path
) -> None:
    run = shutil.copytree(pristine, tmp_path / "run")
    res = bench("reproduce", run)
    assert res.exit_code == 0, res.output
    assert "report.html and junit.xml re-render byte for byte" in res.output
    assert "the signatures of the run and of every scorecard" in res.output
    assert "the two derived views, which no signature covers" in res.output
    (run / "results" / "junit.xml").unlink()
    res = bench("reproduce", run, "--allow-unsigned")
    assert res.exit_code == 0, res.output
    assert "; report.html re-render byte for byte" in res.output
    assert "signatures of the run" not in res.output
