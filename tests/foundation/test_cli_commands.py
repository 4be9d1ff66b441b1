"""Every user action is a `bench` command (issue 24): the subject digests and the known-answer
vectors have commands, and no document tells anyone to run `python -m runner...`,
`python -m tests...`, a Python one-liner or a script with `sys.path` tricks."""

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
    assert "unchanged vectors/environment/cases.json" in res.output
    assert "unchanged vectors/environment/env-a.json" in res.output


LATER = "2025-01-02T00:00:00.000000Z"


def _stored() -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in (ROOT / "vectors").glob("*/*.json")}


def test_vectors_regenerate_check_names_an_identity_change_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import runner.vectors.identity as identity

    real = identity.identity_vector
    monkeypatch.setattr(identity, "identity_vector", lambda p, r: {**real(p, r), "cells": -1})
    before = _stored()
    res = cli.invoke(app, ["vectors", "regenerate", "--check"])
    assert res.exit_code == 3 and "would change vectors/identity/small.json" in res.output
    assert "would change vectors/environment" not in res.output
    assert _stored() == before


def test_vectors_regenerate_check_names_an_environment_change_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import runner.vectors.environment as environment

    real = environment.obs  # a later measurement time: every artifact and its hash moves
    monkeypatch.setattr(environment, "obs", lambda *a, **k: real(*a, **k, at=LATER))
    before = _stored()
    res = cli.invoke(app, ["vectors", "regenerate", "--check"])
    assert res.exit_code == 3, res.output
    assert "would change vectors/environment/env-a.json" in res.output
    assert "would change vectors/environment/cases.json" in res.output
    assert "would change vectors/identity" not in res.output
    assert _stored() == before


def test_vectors_regenerate_writes_what_check_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without --check the changed files are written (into a copy of the vector folders)."""
    import shutil

    import runner.vectors.environment as environment
    from runner.vectors import regenerate

    for family in ("identity", "environment"):
        shutil.copytree(ROOT / "vectors" / family, tmp_path / "vectors" / family)
    shutil.copytree(ROOT / "specs", tmp_path / "specs")  # example.toml and its tasks
    real = environment.obs
    monkeypatch.setattr(environment, "obs", lambda *a, **k: real(*a, **k, at=LATER))
    changed = regenerate(tmp_path, write=True)
    assert changed[tmp_path / "vectors" / "environment" / "env-a.json"]
    assert not changed[tmp_path / "vectors" / "identity" / "small.json"]
    assert not any(regenerate(tmp_path, write=False).values())  # written: now current
    assert b"2025-01-02" in (tmp_path / "vectors" / "environment" / "env-a.json").read_bytes()


DOCS = [ROOT / "README.md", ROOT / "scripts" / "setup.sh", *sorted((ROOT / "docs").glob("*.md"))]
DOCS += [p for p in [ROOT / "CONTRIBUTING.md", ROOT / "keys" / "README.md"] if p.exists()]
DOCS += sorted((ROOT / "subjects").glob("*/README.md"))


# A side door: a module of the runner or of the tests run as a program, a Python one-liner, a
# test-folder script. The benchmarks of tests/perf/ are measurement tools, not user actions.
SIDE_DOORS = (
    r"python[0-9.]* -m (runner|tests)\.",
    r"python[0-9.]* -c ",
    r"python[0-9.]* (\./)?tests/(?!perf/)",
    r"import tree_digest",
    r"regenerate\.py",
    r"vectors_gen",
)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_document_sends_anyone_through_a_side_door(doc: Path) -> None:
    text = doc.read_text()
    for door in SIDE_DOORS:
        found = re.search(door, text)
        assert found is None, f"{doc.name}: {found.group(0)!r}: use a bench command"
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


@pytest.mark.parametrize(
    "line",
    [
        "run `python -m runner.runtime.subjectenv build`",
        "uv run python3 -m tests.environment.vectors_gen",
        ".venv/bin/python -c 'from x import tree_digest'",
        "python tests/environment/gen.py",
    ],
)
def test_a_planted_side_door_is_found(line: str) -> None:
    assert any(re.search(door, line) for door in SIDE_DOORS), line
    assert not any(re.search(d, "bench vectors regenerate --check") for d in SIDE_DOORS)


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


def _commands() -> dict[str, set[str]]:
    """Every top-level command -> its subcommands (empty for a plain command)."""
    import typer.main

    root = typer.main.get_command(app)
    groups = getattr(root, "commands", None)
    assert isinstance(groups, dict) and groups
    return {name: set(getattr(cmd, "commands", {})) for name, cmd in groups.items()}


def _said(text: str) -> set[tuple[str, str | None]]:
    """`bench CMD [SUB]` as written in code: inline spans and fenced blocks."""
    code = re.findall(r"`([^`\n]+)`", text)
    code += re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)
    said = set()
    for chunk in code:
        for m in re.finditer(r"(?:^|[\s/(])bench ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", chunk):
            said.add((m.group(1), m.group(2)))
    return said


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_bench_command_a_document_names_exists(doc: Path) -> None:
    """A document never tells anyone to run a command `bench --help` does not list."""
    commands = _commands()
    for cmd, sub in _said(doc.read_text()):
        assert cmd in commands, f"{doc.name}: `bench {cmd}` is no command"
        if commands[cmd] and sub is not None:
            assert sub in commands[cmd], f"{doc.name}: `bench {cmd} {sub}` is no command"


def test_readme_lists_every_command() -> None:
    """`bench --help` and README's command table list the same actions: every command and
    subcommand has a row (`bench registry list\\|add` names two)."""
    rows = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| `bench")]
    text = "\n".join(rows).replace("\\|", " ")
    for cmd, subs in _commands().items():
        assert re.search(rf"`bench {cmd}\b", text), f"bench {cmd}"
        for sub in subs:
            assert re.search(rf"bench {cmd} [^|]*\b{sub}\b", text), f"bench {cmd} {sub}"


def test_a_command_no_one_has_is_caught() -> None:
    said = _said("run `bench publish RUN` then\n```sh\n.venv/bin/bench keys rotate\n```\n")
    assert said == {("publish", None), ("keys", "rotate")}
    commands = _commands()
    assert "publish" not in commands and "rotate" not in commands["keys"]
    assert "sign" in commands["keys"] and commands["verify"] == set()
