"""Every user action is a `bench` command (issue 24): the subject digests and the identity
vectors have commands, and no document tells anyone to run `python -m runner...` or a script
with `sys.path` tricks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.runtime.subjects.tree import tree_digest

ROOT = Path(__file__).resolve().parents[2]
cli = CliRunner()


def test_subjects_digest_prints_what_the_spec_declares() -> None:
    spec = tomllib.loads((ROOT / "specs" / "swe-lite-agents.toml").read_text())
    declared = {
        s["config"]["environment"]["project"]: s["config"]["environment"]["digest"]
        for s in spec["subjects"]
        if "environment" in s.get("config", {})
    }
    assert declared
    for project, digest in declared.items():
        res = cli.invoke(app, ["subjects", "digest", str(ROOT / project)])
        assert res.exit_code == 0, res.output
        assert res.output.split()[0] == digest == tree_digest(ROOT / project)


def test_subjects_digest_moves_with_one_byte(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    first = cli.invoke(app, ["subjects", "digest", str(tmp_path)]).output.split()[0]
    (tmp_path / "a.txt").write_text("y")
    second = cli.invoke(app, ["subjects", "digest", str(tmp_path)]).output.split()[0]
    assert first != second and first.startswith("sha256:")


@pytest.mark.parametrize("command", ["digest", "build"])
def test_subjects_commands_refuse_a_non_folder(tmp_path: Path, command: str) -> None:
    res = cli.invoke(app, ["subjects", command, str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not a folder" in res.output, res.output


def test_subjects_build_refuses_a_folder_outside_the_checkout(tmp_path: Path) -> None:
    res = cli.invoke(app, ["subjects", "build", str(tmp_path)])
    assert res.exit_code == 2 and "not inside the checkout" in res.output, res.output


def test_vectors_regenerate_check_is_clean() -> None:
    res = cli.invoke(app, ["vectors", "regenerate", "--check"])
    assert res.exit_code == 0, res.output
    assert "unchanged vectors/identity/example.json" in res.output


def test_vectors_regenerate_check_names_a_change_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import runner.vectors as vectors

    real = vectors.identity_vector
    monkeypatch.setattr(vectors, "identity_vector", lambda p, r: {**real(p, r), "cells": -1})
    before = {p: p.read_bytes() for p in (ROOT / "vectors" / "identity").glob("*.json")}
    res = cli.invoke(app, ["vectors", "regenerate", "--check"])
    assert res.exit_code == 3 and "would change vectors/identity/small.json" in res.output
    assert {p: p.read_bytes() for p in before} == before


DOCS = [ROOT / "README.md", ROOT / "scripts" / "setup.sh", *sorted((ROOT / "docs").glob("*.md"))]
DOCS += [p for p in [ROOT / "CONTRIBUTING.md"] if p.exists()]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_document_sends_anyone_through_a_side_door(doc: Path) -> None:
    text = doc.read_text()
    assert not re.search(r"python3? -m runner\.", text), f"{doc.name}: use a bench command"
    assert "import tree_digest" not in text and "regenerate.py" not in text
    assert "make_cassettes.py" not in text, f"{doc.name}: use `bench tasks cassettes --scripted`"


def test_scripted_cassettes_command_writes_the_committed_bytes(tmp_path: Path) -> None:
    """`bench tasks cassettes --scripted` (formerly specs/swe-lite-agents/make_cassettes.py with
    its sys.path trick) reproduces the committed cassettes byte for byte, and prints each
    folder's digest."""
    assert not (ROOT / "specs" / "swe-lite-agents" / "make_cassettes.py").exists()
    spec = ROOT / "specs" / "swe-lite.toml"
    res = cli.invoke(app, ["tasks", "cassettes", "--scripted", "--spec", str(spec),
                           "--out", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    committed = ROOT / "specs" / "swe-lite-agents"
    for folder in ("cassettes", "control-cassettes"):
        ours = {p.name: p.read_bytes() for p in (tmp_path / folder).iterdir()}
        theirs = {p.name: p.read_bytes() for p in (committed / folder).iterdir()}
        assert ours == theirs, folder
    printed = dict(reversed(line.split()) for line in res.output.splitlines())
    assert set(printed) == {str(tmp_path / f) for f in ("cassettes", "control-cassettes")}
    for folder, digest in printed.items():
        assert digest == tree_digest(committed / Path(folder).name)  # a spec's model.digest


def test_every_command_group_is_listed_in_bench_help() -> None:
    res = cli.invoke(app, ["--help"])
    for group in ("subjects", "vectors", "keys", "registry", "sweep", "verify"):
        assert group in res.output, group


def test_jobs_default_follows_the_machine() -> None:
    """The rule README states: min(8, usable CPUs, available memory / 1 GiB), at least 1; one
    CPU of affinity (a real child process pinned to CPU 0) gives 1."""
    import os
    import subprocess
    import sys

    import psutil

    from runner.cli.options import default_jobs, usable_cpus

    cpus = len(os.sched_getaffinity(0))
    mem = psutil.virtual_memory().available >> 30
    assert default_jobs() == max(1, min(8, usable_cpus(), mem)) and usable_cpus() <= cpus
    pinned = subprocess.run(
        [sys.executable, "-c", "import os; os.sched_setaffinity(0, {0}); "
         "from runner.cli.options import default_jobs; print(default_jobs())"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    assert pinned.stdout.strip() == "1"


def test_jobs_with_a_cluster_is_refused(tmp_path: Path) -> None:
    res = cli.invoke(app, ["run", str(ROOT / "specs" / "example.toml"), "--jobs", "2",
                           "--cluster", "tcp://127.0.0.1:1"])  # fmt: skip
    assert res.exit_code == 2 and "--jobs is for a local run" in res.output, res.output


@pytest.mark.parametrize("kind", ["sparse", "fifo"])
def test_subjects_digest_reads_the_tree_bounded(tmp_path: Path, kind: str) -> None:
    """A 2 GiB sparse file or a FIFO in a subject folder: exit 2 naming it, at once."""
    import os
    import time

    bad = tmp_path / "project" / "weights.bin"
    bad.parent.mkdir()
    if kind == "sparse":
        with open(bad, "wb") as fh:
            fh.truncate(2 << 30)
    else:
        os.mkfifo(bad)
    started = time.monotonic()
    res = cli.invoke(app, ["subjects", "digest", str(bad.parent)])
    assert res.exit_code == 2 and "weights.bin" in res.output, res.output
    assert time.monotonic() - started < 5
