"""Bounded, non-blocking reads of files a user or a run directory hands us.

Why: `open(path).read()` on a FIFO blocks forever, on a 2 GiB sparse file allocates 2 GiB, on a
symlink follows it wherever it points, and on a path with a NUL byte or an over-long component
raises something that is not an input error. Every file the evaluator and the CLI read from
outside (a spec, a JSON input, protocol.json, a journal, a blob, a results file) goes through here:
the file's type is checked with lstat/stat *before* it is opened, it is opened O_NONBLOCK (and
O_NOFOLLOW for evidence), its size is capped before a byte is read, and every failure becomes an
InputError (exit 2) or an EvidenceError (exit 3) naming the path, never a traceback or a hang.

The caps are documented in the README ("Limits").
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import EvidenceError, InputError, shorten

MiB = 1 << 20
GiB = 1 << 30

# What one file may hold (README "Limits"): far above any real file of its kind, far below
# what would exhaust memory.
SPEC_CAP = 16 * MiB  # a spec (TOML) file
JSON_INPUT_CAP = 256 * MiB  # `bench canonicalize | digest` input, a scorecard, a freeze log line
PROTOCOL_CAP = 1 * GiB  # protocol.json (about 0.5 KB a slot: ~2 M slots)
RESULT_FILE_CAP = 2 * GiB  # one results/ file (terminal-records.jsonl of a big run)
BLOB_CAP = 1 * GiB  # one content-addressed blob
JOURNAL_LINE_CAP = 16 * MiB  # one journal line
TREE_CAP = 256 * MiB  # a folder hashed whole (a task folder, a subject project, cassettes)
TREE_ENTRIES_CAP = 100_000  # entries in such a folder
TASK_FILE_CAP = 256 * MiB  # one file of a task tree or a subject folder (hashed into identities)
NAME_MAX = 255  # one path component, in bytes (Linux NAME_MAX)
PATH_MAX = 4096  # a whole path, in bytes (Linux PATH_MAX)


def _fail(path: Path | str, message: str, evidence: bool) -> Exception:
    where = shorten(str(path))
    if evidence:
        return EvidenceError(f"{where}: {message}")
    return InputError(message, file=where)


def check_path(path: Path | str, evidence: bool = False) -> None:
    """A path the kernel could take: no NUL byte, no over-long component or whole."""
    text = os.fspath(path)
    if "\0" in text:
        raise _fail(text.replace("\0", "\\0"), "path contains a NUL byte", evidence)
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX:
        raise _fail(text, f"path is longer than {PATH_MAX} bytes", evidence)
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            raise _fail(text, f"a path component is longer than {NAME_MAX} bytes", evidence)


def file_kind(mode: int) -> str:
    """A file type's name, for messages."""
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _os_message(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def regular_stat(path: Path, evidence: bool = False) -> os.stat_result:
    """stat of a regular file (lstat for evidence: a symlink is refused, not followed)."""
    check_path(path, evidence)
    try:
        st = os.lstat(path) if evidence else os.stat(path)
    except OSError as exc:
        raise _fail(path, f"cannot read: {_os_message(exc)}", evidence) from exc
    if not stat.S_ISREG(st.st_mode):
        raise _fail(path, f"is a {file_kind(st.st_mode)}, expected a regular file", evidence)
    return st


def _open(path: Path, cap: int, evidence: bool) -> tuple[int, int]:
    """An fd of a regular file no larger than cap, and its size; type checked before opening."""
    st = regular_stat(path, evidence)
    if st.st_size > cap:
        raise _fail(path, f"is {st.st_size} bytes; the limit is {cap} bytes", evidence)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if evidence else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _fail(path, f"cannot open: {_os_message(exc)}", evidence) from exc
    try:
        now = os.fstat(fd)
    except OSError as exc:  # pragma: no cover - fstat of an open fd
        os.close(fd)
        raise _fail(path, f"cannot read: {_os_message(exc)}", evidence) from exc
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise _fail(path, "changed while it was being opened", evidence)
    return fd, now.st_size


def read_bounded(
    path: Path, cap: int, *, evidence: bool = False, starts: bytes | None = None
) -> bytes:
    """The bytes of a regular file of at most `cap` bytes.

    `evidence=True`: a run directory's file (a symlink is refused; errors are EvidenceError);
    else a user's input (a symlink is followed; errors are InputError). `starts`: the bytes the
    file must begin with, checked before the rest is read (a sparse giant of zeros is refused in
    one small read, not after reading it whole)."""
    fd, size = _open(path, cap, evidence)
    try:
        if starts is not None:
            try:
                head = os.pread(fd, len(starts), 0)
            except OSError as exc:
                raise _fail(path, f"cannot read: {_os_message(exc)}", evidence) from exc
            if head != starts:
                raise _fail(path, f"does not start with {starts.decode()!r}", evidence)
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                block = os.read(fd, min(max(size - total, 0), 8 * MiB) + 1)
            except OSError as exc:
                raise _fail(path, f"cannot read: {_os_message(exc)}", evidence) from exc
            if not block:
                break
            total += len(block)
            if total > cap:
                raise _fail(path, f"grew past the limit of {cap} bytes", evidence)
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_bounded(path: Path, cap: int, *, evidence: bool = False) -> str:
    data = read_bounded(path, cap, evidence=evidence)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, f"not UTF-8 text (byte {exc.start})", evidence) from exc


def sha256_bounded(path: Path, cap: int, *, evidence: bool = True) -> str:
    """`sha256:` digest of a regular file of at most `cap` bytes, streamed (not held)."""
    fd, _ = _open(path, cap, evidence)
    h = hashlib.sha256()
    total = 0
    try:
        while True:
            try:
                block = os.read(fd, 8 * MiB)
            except OSError as exc:
                raise _fail(path, f"cannot read: {_os_message(exc)}", evidence) from exc
            if not block:
                break
            total += len(block)
            if total > cap:
                raise _fail(path, f"grew past the limit of {cap} bytes", evidence)
            h.update(block)
    finally:
        os.close(fd)
    return "sha256:" + h.hexdigest()


def lines_bounded(
    path: Path, line_cap: int, file_cap: int, *, evidence: bool = True
) -> Iterator[bytes]:
    """The lines of a regular file (each with its newline, the last possibly without), each at
    most `line_cap` bytes, the whole at most `file_cap`; streamed."""
    fd, _ = _open(path, file_cap, evidence)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            total = 0
            n = 0
            while True:
                line = fh.readline(line_cap + 1)
                if not line:
                    return
                n += 1
                total += len(line)
                if len(line) > line_cap:
                    raise _fail(path, f"line {n} is longer than {line_cap} bytes", evidence)
                if total > file_cap:
                    raise _fail(path, f"grew past the limit of {file_cap} bytes", evidence)
                yield line
    finally:
        os.close(fd)


def tree_problem(root: Path, cap: int = TREE_CAP, entries: int = TREE_ENTRIES_CAP) -> str | None:
    """Why a folder about to be hashed whole cannot be (None: it can): an entry that is not a
    regular file, folder or symlink, more than `entries` entries, or more than `cap` bytes in
    all. Read by lstat alone (nothing is opened or followed), so a FIFO or a 2 GiB sparse file
    is named at once instead of blocking or being read for minutes."""
    total = count = 0
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"an unreadable entry {shorten(str(path))} ({exc.strerror})"
        count += 1
        if count > entries:
            return f"more than {entries} entries"
        if stat.S_ISDIR(st.st_mode):
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                return f"an unreadable directory {shorten(str(path))} ({exc.strerror})"
            stack.extend(path / n for n in names)
        elif stat.S_ISREG(st.st_mode):
            total += st.st_size
            if total > cap:
                return (f"{shorten(str(path))} ({st.st_size} bytes), past the limit of {cap} "
                        "bytes a folder hashed whole may hold in all")  # fmt: skip
        elif not stat.S_ISLNK(st.st_mode):
            return f"a {file_kind(st.st_mode)} {shorten(str(path))}"
    return None


def check_tree(root: Path, cap: int = TREE_CAP, entries: int = TREE_ENTRIES_CAP) -> None:
    """tree_problem as an InputError naming the folder."""
    problem = tree_problem(root, cap, entries)
    if problem is not None:
        raise _fail(root, f"holds {problem}; a folder hashed whole holds only regular files, "
                    "directories and symlinks, within the limits", False)  # fmt: skip
