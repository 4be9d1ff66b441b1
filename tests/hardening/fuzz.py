"""Hypothesis strategies and checks for fuzzing the CLI's inputs: spec text, JSON files and run
directory layouts. Shared by tests/hardening/test_fuzz_*.py (a small budget) and
tests/perf/fuzz_inputs.py (>= 10,000 examples).

Every input goes through the real CLI entry in process (click's runner over the one Typer app,
built once), and every answer must keep the exit-code contract: 0, or 2 for an input mistake
(3 for evidence), one short message, never a traceback (exit 1) or a hang.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import typer
from click.testing import CliRunner, Result
from hypothesis import strategies as st

from runner.cli.main import app
from tests.foundation.helpers import EXAMPLE

COMMAND = typer.main.get_command(app)
SPEC_TEXT = EXAMPLE.read_text("utf-8")
OUTPUT_LIMIT = 8000  # characters: a message is short, whatever the input


EXIT_CODES: Counter[tuple[str, int]] = Counter()  # (command, exit code) -> times seen


def cli(*args: str | Path) -> Result:
    res = CliRunner().invoke(COMMAND, [str(a) for a in args])
    EXIT_CODES[(str(args[0]), res.exit_code)] += 1
    return res


def contract_problem(res: Result, allowed: set[int]) -> str | None:
    """Why `res` breaks the exit-code contract, or None."""
    out = res.output
    if res.exit_code not in allowed:
        return f"exit {res.exit_code} (allowed {sorted(allowed)}): {out[:2000]}"
    if "Traceback" in out or "internal error" in out:
        return f"traceback: {out[:2000]}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"exception {type(res.exception).__name__}: {res.exception}"
    if res.exit_code != 0 and len(out) > OUTPUT_LIMIT:
        return f"{len(out)} characters of error output"
    return None


# ------------------------------------------------------------------------------------ specs

_VALUE_RE = re.compile(r"= *([^\n]+)")
VALUE_SITES = [m.span(1) for m in _VALUE_RE.finditer(SPEC_TEXT)]
LINES = SPEC_TEXT.splitlines(keepends=True)
TOML_CHARS = st.sampled_from([*"[]{}=\",.'#\n\t \\-_0123456789aeiouxyzAZ", "\\u0000"])


def _deep(depth: int, table: bool) -> str:
    return ("{ a = " * depth + "1" + " }" * depth) if table else ("[" * depth + "1" + "]" * depth)


toml_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda f: {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(str(f), repr(f))
    ),
    st.text(max_size=30).map(lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.integers(min_value=0, max_value=5).map(lambda n: '"' + "x" * (10**n) + '"'),
    st.sampled_from(["true", "false", "1979-05-27T07:32:00Z", "07:32:00", "[]", "{}", '""']),
    st.tuples(st.integers(1, 3000), st.booleans()).map(lambda p: _deep(*p)),
    st.sampled_from(['"../../etc"', '"/etc/passwd"', '"example-tasks/toy-add\\u0000x"']),
)


@st.composite
def spec_texts(draw: st.DrawFn) -> str:
    """specs/example.toml with one to three random edits."""
    text = SPEC_TEXT
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["value", "value", "insert", "delete", "line", "swap"]))
        if op == "value":
            start, end = draw(st.sampled_from(VALUE_SITES))
            if end <= len(text):
                text = text[:start] + draw(toml_values) + text[end:]
        elif op == "insert":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + "".join(draw(st.lists(TOML_CHARS, max_size=12))) + text[i:]
        elif op == "delete":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + text[i + draw(st.integers(1, 40)) :]
        elif op == "line":
            lines = text.splitlines(keepends=True)
            k = draw(st.integers(0, max(len(lines) - 1, 0)))
            lines.insert(k, draw(st.sampled_from(LINES)))
            text = "".join(lines)
        else:
            lines = text.splitlines(keepends=True)
            if len(lines) > 1:
                i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
                text = "".join(lines)
    return text


def check_spec(spec_path: Path, text: str) -> str | None:
    """Write `text` as the spec and plan it: 0 or 2, never a traceback."""
    spec_path.write_text(text, "utf-8", errors="surrogatepass")
    return contract_problem(cli("plan", spec_path), {0, 2})


# ------------------------------------------------------------------------------------- JSON

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def json_bytes(draw: st.DrawFn) -> bytes:
    """Valid JSON, then maybe broken: spliced bytes, deep nesting, NaN, duplicate keys or bad
    UTF-8."""

    data = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans())).encode()
    op = draw(st.sampled_from(["none", "splice", "deep", "special", "utf8"]))
    if op == "splice":
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.binary(max_size=8)) + data[i + draw(st.integers(0, 4)) :]
    elif op == "deep":
        d = draw(st.integers(1, 200_000))
        data = b"[" * d + data + b"]" * d
    elif op == "special":
        data = draw(
            st.sampled_from(
                [b"NaN", b"[Infinity]", b'{"a":1,"a":2}', b"9" * 400, b"1e999", b'"\\ud800"']
            )
        )
    elif op == "utf8":
        data = data + b'["\xff\xfe"]'
    return data


# A fuzz finding, kept visible: RFC 8785 writes an integral float beyond 2^53 as plain digits
# (9007199254740992.0 -> 9007199254740992), which the strict parser then refuses as an integer
# outside +-(2^53-1). The check allows exactly this and nothing else.
UNSAFE_INTEGER = "outside ±(2^53-1)"


def check_json(path: Path, data: bytes) -> str | None:
    path.write_bytes(data)
    first = cli("canonicalize", path)
    problem = contract_problem(first, {0, 2})
    if problem is None:
        problem = contract_problem(cli("digest", path), {first.exit_code})
    if problem is None and first.exit_code == 0:  # canonical bytes are a fixed point
        path.write_bytes(first.stdout_bytes)
        again = cli("canonicalize", path)
        if again.exit_code != 0 and UNSAFE_INTEGER in again.output:
            pass  # known: a float 2^53 or beyond canonicalizes to digits that parse as an int
        elif again.exit_code != 0 or again.stdout_bytes != first.stdout_bytes:
            problem = "canonicalize is not idempotent"
    return problem


# ------------------------------------------------------------------------------ run layouts

PLACES = [".", "journals", "blobs", "blobs/sha256", "results", "results/a", "results/b"]
KINDS = ["file", "empty", "dir", "symlink-in", "symlink-out", "dangling", "fifo", "socket"]
NAMED = [
    "x.jsonl", "run.jsonl.torn-1", ".x", "differs", "proof.json", "md5", "0" * 64,
    "0123456789abcdef-a1.jsonl.torn-2", "protocol.json.tmp", "report.html", "results",
]  # fmt: skip
names = st.one_of(
    st.sampled_from(NAMED),
    st.text(st.sampled_from("abcdef0123456789.-_x"), min_size=1, max_size=70),
)


@dataclass(frozen=True)
class Extra:
    place: str
    name: str
    kind: str

    @property
    def rel(self) -> str:
        return self.name if self.place == "." else f"{self.place}/{self.name}"


extras = st.builds(Extra, st.sampled_from(PLACES), names, st.sampled_from(KINDS))


def plant(run: Path, extra: Extra, outside: Path) -> Path | None:
    """Create the extra entry; None when the name is taken (nothing planted)."""
    path = run / extra.rel
    if not path.parent.is_dir() or os.path.lexists(path) or extra.name in (".", ".."):
        return None
    if extra.kind == "file":
        path.write_bytes(b'{"planted":true}\n')
    elif extra.kind == "empty":
        path.write_bytes(b"")
    elif extra.kind == "dir":
        path.mkdir()
    elif extra.kind == "symlink-in":
        path.symlink_to(run / "protocol.json")
    elif extra.kind == "symlink-out":
        path.symlink_to(outside)
    elif extra.kind == "dangling":
        path.symlink_to(run / "nonexistent")
    elif extra.kind == "fifo":
        os.mkfifo(path)
    else:  # bound by a relative name: an AF_UNIX path holds at most 107 bytes
        here = os.getcwd()
        s = socket.socket(socket.AF_UNIX)
        try:
            os.chdir(path.parent)
            s.bind(path.name)
        finally:
            s.close()
            os.chdir(here)
    return path


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()


def accepted(extra: Extra) -> bool:
    """The planted entries the evidence check (`publish.results.verify`) passes over: a regular
    file at one of the two derived views' paths (bound by no hash; the CLI's verify re-renders
    the view and refuses one that is not what the run renders, runner/report/check.py). An
    empty attempt journal is no longer among them: a journal is created with its first record."""
    return extra.rel in ("results/report.html", "results/junit.xml") and extra.kind in (
        "file",
        "empty",
    )


def check_layout(run: Path, extra: Extra, outside: Path) -> str | None:
    """Plant `extra`, verify (exit 3 naming it, or 0 for an accepted entry), remove it."""
    from runner.evaluator.core.inputs import evaluator_digest
    from runner.evaluator.publish.results import verify

    path = plant(run, extra, outside)
    if path is None:
        return None
    try:
        problems = verify(run, evaluator_digest())
        res = cli("verify", run)
        if accepted(extra):
            return contract_problem(res, {0, 3})
        problem = contract_problem(res, {3})
        if problem is not None:
            problem = f"{extra}: {problem}"
        if problem is None and not any(extra.rel in p or extra.name in p for p in problems):
            problem = f"{extra}: not named by verify: {problems[:3]}"
        return problem
    finally:
        remove(path)


# ----------------------------------------------------------------------------- journal bytes


@dataclass(frozen=True)
class Edit:
    journal: int  # index into the run's sorted journals
    op: str
    at: float  # where, as a fraction of the file
    data: bytes

    def apply(self, raw: bytes) -> bytes:
        i = int(self.at * len(raw))
        lines = raw.splitlines(keepends=True)
        k = int(self.at * len(lines)) if lines else 0
        if self.op == "replace":
            return raw[:i] + self.data + raw[i + len(self.data) :]
        if self.op == "insert":
            return raw[:i] + self.data + raw[i:]
        if self.op == "delete":
            return raw[:i] + raw[i + max(1, len(self.data)) :]
        if self.op == "truncate":
            return raw[:i]
        if self.op == "duplicate line" and lines:
            return b"".join([*lines[: k + 1], *lines[k:]])
        if self.op == "drop line" and lines:
            return b"".join(lines[:k] + lines[k + 1 :])
        return raw


edits = st.builds(
    Edit,
    st.integers(0, 10_000),
    st.sampled_from(["replace", "insert", "delete", "truncate", "duplicate line", "drop line"]),
    st.floats(0, 1, exclude_max=True),
    st.binary(min_size=1, max_size=6) | st.sampled_from([b'"', b"\n", b"{}", b"\\", b"\xff"]),
)


def check_journal_edit(run: Path, edit: Edit) -> str | None:
    """Edit one journal's bytes, verify (exit 3, or 0 when the bytes did not change), restore."""
    journals = sorted((run / "journals").iterdir())
    path = journals[edit.journal % len(journals)]
    raw = path.read_bytes()
    new = edit.apply(raw)
    path.write_bytes(new)
    try:
        problem = contract_problem(cli("verify", run), {0} if new == raw else {3})
        return None if problem is None else f"{edit} on {path.name}: {problem}"
    finally:
        path.write_bytes(raw)
