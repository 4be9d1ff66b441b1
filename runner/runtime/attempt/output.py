"""The bounded tail of what one subject launch wrote to its stdout.log / stderr.log.

Journaled in the launch's `subject_exit` record (`stdout_tail`, `stderr_tail`), so a draft's
diagnostics can show, from evidence alone, why an agent died (an argv typo's "No such file or
directory"). The logs live in the subject's own state directory, which the subject (nobody) may
rearrange: the runtime (root) reads a log only as a regular file it created itself (owned by its
own uid, one link, never through a symlink, non-blocking), so a subject cannot make it journal
another file. Logs are appended across relaunches: a launch's tail starts at the size the log
had when it started.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.evidence.records import OUTPUT_TAIL_BYTES, OUTPUT_TAIL_LINES

STREAMS = ("stdout", "stderr")


def _open_own(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        return None
    return fd


def log_size(path: Path) -> int:
    """The log's size now (0 when absent or not the runtime's own file)."""
    fd = _open_own(path)
    if fd is None:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def tail(path: Path, since: int = 0) -> str | None:
    """The last OUTPUT_TAIL_LINES lines written after offset `since`, from at most the last
    OUTPUT_TAIL_BYTES bytes (a partial first line dropped); None when the log is unreadable."""
    fd = _open_own(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(since, size - OUTPUT_TAIL_BYTES, 0)
        data = os.pread(fd, size - start, start) if size > start else b""
    finally:
        os.close(fd)
    if start > since and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # cut mid-line: keep whole lines only
    lines = data.decode("utf-8", "replace").splitlines()[-OUTPUT_TAIL_LINES:]
    return "\n".join(lines)[-OUTPUT_TAIL_BYTES:]


@dataclass(frozen=True)
class LaunchOutput:
    """The logs' sizes when a launch started: its tails are read from there at its exit."""

    state_dir: Path
    offsets: tuple[int, int]

    @classmethod
    def mark(cls, state_dir: Path) -> LaunchOutput:
        sizes = tuple(log_size(state_dir / f"{s}.log") for s in STREAMS)
        return cls(state_dir, (sizes[0], sizes[1]))

    def tails(self) -> dict[str, str | None]:
        return {
            f"{s}_tail": tail(self.state_dir / f"{s}.log", off)
            for s, off in zip(STREAMS, self.offsets, strict=True)
        }
