"""The leak check: does any part of a task's known answer appear in what a subject can see?

The known answer of a swe-lite task is its gold patch, its tests patch and its hidden tests' ids.
A *marker* is a line the patches add (stripped, long enough to be distinctive, and not a line
the patches also show as context or remove, nor one in the pristine sources or quoted by the
problem statement: those are public on purpose), or a hidden test id (the FAIL_TO_PASS ids, and
each one's test name: those tests do not exist until the tests patch is applied). PASS_TO_PASS
ids are markers only for what the harness hands an agent (they name tests that already exist in
the sources, so the sandbox holds them by design).

`leaks_in_text` is for the small things a subject is handed (task file, argv, environment, tool
listings, state directory): any marker as a substring, JSON-escaped newlines undone first.
`leaks_in_image` reads the sandbox image's whole filesystem (`podman export`), line by line.
"""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.benchmarks.swe_lite.grade import Task

MIN_LINE = 16  # shorter added lines (`return x`, `pass`, `)`) are not distinctive
_TEST_TOKEN = re.compile(rb"test_\w+")


@dataclass(frozen=True)
class Markers:
    task_id: str
    lines: frozenset[str]  # distinctive lines the gold and tests patches add
    hidden_ids: frozenset[str]  # FAIL_TO_PASS ids
    hidden_names: frozenset[str]  # their test names (the last `::` part)
    existing_ids: frozenset[str]  # PASS_TO_PASS ids (not in any agent-facing artefact either)

    def for_agent(self) -> list[str]:
        return sorted(self.lines | self.hidden_ids | self.hidden_names | self.existing_ids)


def _patch_lines(patch: str) -> tuple[set[str], set[str]]:
    added, kept = set(), set()
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith("+"):
            added.add(line[1:].strip())
        elif line.startswith((" ", "-")):
            kept.add(line[1:].strip())
    return added, kept


def pristine_lines_and_tokens(root: Path) -> tuple[set[str], set[str]]:
    """Every stripped line and `test_...` token of the pristine sources (the sdists, extracted)."""
    lines: set[str] = set()
    tokens: set[str] = set()
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            lines.update(ln.strip().decode("utf-8", "replace") for ln in data.splitlines())
            tokens.update(t.decode() for t in _TEST_TOKEN.findall(data))
    return lines, tokens


def markers_for(task: Task, pristine: tuple[set[str], set[str]] = (set(), set())) -> Markers:
    """`pristine`: the pristine sources' lines and test tokens; a patch line or a test name
    found there is in the sandbox by design (not the answer), so it is no marker."""
    added, kept = set(), set()
    for patch in (task.gold_patch.decode(), task.tests_patch.decode()):
        a, k = _patch_lines(patch)
        added |= a
        kept |= k
    public = task.problem  # the issue text is given to agents: what it quotes is public
    lines = frozenset(
        x for x in added - kept - pristine[0] if len(x) >= MIN_LINE and x not in public
    )
    names = frozenset(
        n for t in task.fail_to_pass if (n := t.rsplit("::", 1)[-1].split("[")[0]) not in public
    )
    existing = {t.rsplit("::", 1)[-1].split("[")[0] for t in task.pass_to_pass} | pristine[1]
    return Markers(
        task.id, lines, frozenset(task.fail_to_pass), names - existing,
        frozenset(task.pass_to_pass),
    )  # fmt: skip


def leaks_in_text(where: str, text: str, m: Markers) -> list[str]:
    """Every marker found in `text` (and in `text` with JSON string escapes undone)."""
    texts = [text]
    try:
        texts.append(json.loads(f'"{text}"'))
    except ValueError:
        texts.append(text.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\"))
    return [f"{where}: {k!r}" for k in m.for_agent() if any(k in t for t in texts)]


def leaks_in_json(where: str, value: object, m: Markers) -> list[str]:
    """Every marker in any string of a JSON value, and in its serialisation."""
    out = leaks_in_text(where, json.dumps(value, ensure_ascii=False), m)
    out += [x for s in _strings(value) for x in leaks_in_text(where, s, m)]
    return sorted(set(out))


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def leaks_in_tree(root: Path, m: Markers) -> list[str]:
    """Every marker in any regular file under `root` (names included)."""
    out = []
    for p in sorted(root.rglob("*")):
        out += leaks_in_text(f"{p} (name)", p.name, m)
        if p.is_file() and not p.is_symlink():
            out += leaks_in_text(str(p), p.read_bytes().decode("utf-8", "replace"), m)
    return out


def leaks_in_bytes(where: str, data: bytes, markers: Iterable[Markers]) -> list[str]:
    """Line-wise (the image is large): a marker line equal to a stripped line of `data`, or a
    hidden test name as a `test_...` token."""
    ms = list(markers)
    lines = set()
    for raw in data.splitlines():
        ln = raw.strip().decode("utf-8", "replace")
        lines.add(ln)
        if ln[:1] in ("+", "-"):  # a line of a diff: its content too
            lines.add(ln[1:].strip())
    tokens = {t.decode() for t in _TEST_TOKEN.findall(data)}
    out = []
    for m in ms:
        out += [f"{where}: {m.task_id} line {x!r}" for x in sorted(m.lines & lines)]
        out += [f"{where}: {m.task_id} test {x!r}" for x in sorted(m.hidden_names & tokens)]
    return out


def leaks_in_image(tag: str, markers: Iterable[Markers]) -> tuple[list[str], int]:
    """Every marker anywhere in the image's filesystem; and how many files were read."""
    ms = list(markers)
    cid = subprocess.run(
        ["podman", "create", "--network=none", tag], check=True, capture_output=True, text=True
    ).stdout.strip()
    out: list[str] = []
    files = 0
    try:
        with subprocess.Popen(["podman", "export", cid], stdout=subprocess.PIPE) as proc:
            assert proc.stdout is not None
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    out += [f"{member.name} (name): {x}" for m in ms for x in m.hidden_names
                            if x in member.name]  # fmt: skip
                    if not member.isfile():
                        continue
                    fh = tar.extractfile(member)
                    if fh is None:
                        continue
                    files += 1
                    out += leaks_in_bytes(member.name, fh.read(), ms)
        assert proc.returncode == 0, f"podman export exited {proc.returncode}"
    finally:
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True)
    return out, files
