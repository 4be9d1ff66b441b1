"""The property every command that reads a run directory or bundle keeps (issue 29), stated once
for all of them over the hostile corpus (tests/hardening/corpus.py): it ends within seconds with
exit 2 or 3 (compare: its refusal, 4) and a one-line reason, never a traceback; the input, and the
directory beside it that a symlink leads to, are byte-identical afterwards; and `verify` and
`reproduce` refuse the same inputs with the same codes, signed and unsigned.

Each command runs in-process (typer's CliRunner) under an alarm: a read that blocks (a FIFO) fails
the test instead of hanging it. Half the invocations go through a symlink to the run directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.foundation.helpers import bench
from tests.hardening.corpus import CASES, Case, listing
from tests.hardening.runs import evaluated

SECONDS = 5.0  # "a second or two" on an idle machine; this one is shared by many processes


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runner.report import write_junit, write_report

    root = tmp_path_factory.mktemp("corpus")
    run = evaluated(root / "run", lambda i, s: "duplicate" if i % 3 == 0 else "completed").run_dir
    write_report(run)
    write_junit(run)
    return run


def _registry(where: Path) -> Path:
    reg = where / "registry.jsonl"
    res = bench("registry", "init", "--registry", reg)
    assert res.exit_code == 0, res.output
    return reg


Command = tuple[str, Callable[[Path, Path], list[object]], set[str]]
EVERYTHING = {"layout", "journal", "evidence", "results", "views"}
READERS = {"layout", "journal"}  # what a command that reads journals but no result refuses
CHECKERS = {"layout", "journal", "evidence", "results"}  # results checked against evidence
# evaluate and report write results/ (and evaluate signatures/) by design: for a case they do
# not refuse, only the rest of the input must stay as it was
WRITERS = {"evaluate", "report", "report --junit"}
# (name, argv of (run, scratch), the case scopes it must refuse)
COMMANDS: list[Command] = [
    ("verify", lambda r, s: ["verify", r], EVERYTHING),
    ("verify --allow-unsigned", lambda r, s: ["verify", r, "--allow-unsigned"], EVERYTHING),
    ("reproduce", lambda r, s: ["reproduce", r], EVERYTHING),
    ("reproduce --allow-unsigned", lambda r, s: ["reproduce", r, "--allow-unsigned"], EVERYTHING),
    ("regrade", lambda r, s: ["regrade", r, "--out", s / "regraded"], READERS),
    ("merge", lambda r, s: ["merge", r, "--out", s / "merged"], READERS),
    (
        "compare",
        lambda r, s: [
            "compare",
            *sorted((r / "results").glob("*/scorecard.json")),
            "--out",
            s / "cmp",
            "--registry",
            _registry(s),
        ],
        CHECKERS,
    ),
    (
        "registry add",
        lambda r, s: [
            "registry",
            "add",
            r / "results" / "a" / "scorecard.json",
            "--registry",
            _registry(s),
        ],
        CHECKERS,
    ),
    # last: the writers of results/ (a case they take as evidence is evaluated, which replaces
    # the damaged results; nothing after them would see the case any more)
    ("report", lambda r, s: ["report", r], READERS),
    ("report --junit", lambda r, s: ["report", r, "--junit"], {"layout"}),
    ("evaluate", lambda r, s: ["evaluate", r], READERS),
]


def _outside_results(entries: dict[str, tuple[int, int, int, str]]) -> dict[str, object]:
    # the run directory's own mtime moves with the results' swap; its entries are compared
    return {k: v for k, v in entries.items() if k != "run"
            and not k.startswith(("run/results", "run/signatures", "link/"))}  # fmt: skip


class Hung(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hung()


def _run(argv: list[object]) -> tuple[int, str, float]:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    start = time.monotonic()
    try:
        res = bench(*argv)
    except Hung:
        return -1, f"hung: {argv}", time.monotonic() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return res.exit_code, res.output, time.monotonic() - start


def _copy(pristine: Path, into: Path) -> Path:
    run = into / "run"
    shutil.copytree(pristine, run, symlinks=True)
    return run


@pytest.fixture
def case_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    subprocess.run(["chmod", "-R", "u+rwX", str(tmp_path)], check=False)


def test_the_untouched_run_passes_every_command(pristine: Path, case_dir: Path) -> None:
    """Negative first: each command accepts the pristine run, so a refusal below is the case's."""
    run = _copy(pristine, case_dir)
    for name, argv, _ in COMMANDS:
        if name == "evaluate":
            continue  # writes results (its job): checked on its own copy below
        scratch = case_dir / name.replace(" ", "_")
        scratch.mkdir()
        code, output, _ = _run(argv(run, scratch))
        assert code == 0, (name, output)
    code, output, _ = _run(["evaluate", _copy(pristine, case_dir / "e")])
    assert code == 0, output


def _plant(case: Case, run: Path, outside: Path) -> None:
    """Apply a case; one only root can plant (a character device: mknod) skips, naming it, when
    the loop runs without root (CONTRIBUTING.md)."""
    try:
        case.apply(run, outside)
    except PermissionError as exc:
        if os.geteuid() == 0:
            raise
        pytest.skip(f"needs root to plant {case.name!r}: {exc}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_reading_command_refuses_every_case(
    pristine: Path, case_dir: Path, case: Case
) -> None:
    run = _copy(pristine, case_dir)
    outside = case_dir / "outside"
    outside.mkdir()
    _plant(case, run, outside)
    link = case_dir / "link"
    link.symlink_to(run)
    before = listing(case_dir)
    codes: dict[str, int] = {}
    for n, (name, argv, scopes) in enumerate(COMMANDS):
        scratch = case_dir.parent / f"{case_dir.name}-scratch" / name.replace(" ", "_")
        scratch.mkdir(parents=True)
        code, output, took = _run(argv(link if n % 2 else run, scratch))
        codes[name] = code
        assert code != -1, f"{name} hung on {case.name}"
        assert took < SECONDS, f"{name} took {took:.1f} s on {case.name}"
        assert "Traceback" not in output and "internal error" not in output, (name, output)
        refused = case.scope in scopes
        if refused:
            allowed = {2, 3, 4} if name == "compare" else {2, 3}
            assert code in allowed, (name, code, output)
            reason = [line for line in output.splitlines() if line.strip()]
            assert reason, (name, output)
        after = listing(case_dir)
        if name in WRITERS and not refused:
            assert _outside_results(after) == _outside_results(before), (name, case.name)
            before = after
        else:
            assert after == before, f"{name} changed the input ({case.name})"
    assert codes["verify"] == codes["reproduce"], codes
    assert codes["verify --allow-unsigned"] == codes["reproduce --allow-unsigned"], codes


READ_ONLY_CASES = [c for c in CASES if c.name in (
    "fifo in place of a journal", "journals missing", "sparse 256 MiB protocol.json",
    "records reordered, chain recomputed", "report.html edited",
)]  # fmt: skip


@pytest.mark.parametrize("case", READ_ONLY_CASES, ids=[c.name for c in READ_ONLY_CASES])
def test_on_a_read_only_bind_mount(pristine: Path, case_dir: Path, case: Case) -> None:
    """The same property where any write would fail loudly: the run on a read-only bind mount."""
    run = _copy(pristine, case_dir)
    outside = case_dir / "outside"
    outside.mkdir()
    _plant(case, run, outside)
    mounted = case_dir / "ro"
    mounted.mkdir()
    made = subprocess.run(["mount", "--bind", "-o", "ro", str(run), str(mounted)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"optional: cannot bind-mount read-only here: {made.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        before = listing(run)
        for name, argv, scopes in COMMANDS:
            scratch = case_dir / "scratch" / name.replace(" ", "_")
            scratch.mkdir(parents=True)
            code, output, _ = _run(argv(mounted, scratch))
            assert code != -1 and "Traceback" not in output, (name, output)
            if case.scope in scopes:
                assert code in ({2, 3, 4} if name == "compare" else {2, 3}), (name, output)
        assert listing(run) == before
    finally:
        subprocess.run(["umount", str(mounted)], check=False)


def test_a_read_only_copy_of_the_pristine_run_verifies_and_reproduces(
    pristine: Path, case_dir: Path
) -> None:
    """Readers need no write access at all: the untouched run, read-only, passes them."""
    run = _copy(pristine, case_dir)
    for dirpath, _, filenames in os.walk(run):
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o444)
    before = listing(run)
    for argv in (["verify", run], ["reproduce", run], ["reproduce", run, "--allow-unsigned"]):
        code, output, _ = _run(argv)  # type: ignore[arg-type]
        assert code == 0, output
    assert listing(run) == before
