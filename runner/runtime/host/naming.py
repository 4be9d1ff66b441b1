"""Per-run resource naming: every host resource an attempt creates carries `afb` + run id.

The prefix is what makes `sweep` safe: it only ever removes resources whose name parses
back to a run id here. Run ids are 6 lowercase hex chars so that veth names
(`afb<runid>h<n>`) fit IFNAMSIZ (16 bytes incl. the NUL, so 15 visible chars).

A run that is alive holds an advisory lock (`hold_run`); `sweep` skips live runs by default.
Two runs on one host never share an id: `new_run_id` reserves a fresh id by creating its lock
file exclusively (O_EXCL), so a second run drawing the same id draws again. A sweep removing a
dead run's leftovers holds that run's lock meanwhile (`SWEEPER` in the file), and `hold_run`
waits for a sweeper rather than failing; a lock file is re-checked after locking (same inode
as the path) because a finished run or a sweep unlinks it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.runtime.host import paths

PREFIX = "afb"
RUN_ID_LEN = 6
IFNAMSIZ_MAX = 15  # visible chars; the kernel's IFNAMSIZ (16) includes the NUL
MAX_INDEX = 99999  # keeps veth names within 15 chars
ENV_RUN = "AFB_RUN"  # env marker on every process we launch (sweep finds them by it)
ENV_ROLE = "AFB_ROLE"

_RUN_ID = r"[0-9a-f]{6}"
_CONTAINER_RE = re.compile(rf"^{PREFIX}-(?P<run>{_RUN_ID})-(?P<suffix>[A-Za-z0-9][A-Za-z0-9_.-]*)$")
_NETNS_RE = re.compile(rf"^{PREFIX}-(?P<run>{_RUN_ID})-(?P<n>\d{{1,5}})$")
_VETH_RE = re.compile(rf"^{PREFIX}(?P<run>{_RUN_ID})(?P<side>[ha])(?P<n>\d{{1,5}})$")
_NFT_RE = re.compile(rf"^{PREFIX}_(?P<run>{_RUN_ID})_(?P<n>\d{{1,5}})$")
_RUN_ID_RE = re.compile(rf"^{_RUN_ID}$")


class NamingError(ValueError):
    """A run id or index that would produce a name outside the scheme."""


@dataclass(frozen=True)
class ParsedName:
    kind: str  # "container" | "netns" | "veth" | "nft"
    run_id: str
    index: int | None  # netns/veth/nft index; None for containers
    suffix: str | None = None  # container suffix
    side: str | None = None  # veth side: "h" (host) or "a" (agent/namespace)


def new_run_id() -> str:
    """Fresh random run id (6 lowercase hex chars), reserved on this host.

    The reservation is the run's lock file, created exclusively: an id whose lock file exists
    (a live run, a run being swept, another fresh reservation) is never handed out again while
    the file is there. Without a writable lock folder (not root) the id is only random.
    """
    for _ in range(64):
        run_id = secrets.token_hex(RUN_ID_LEN // 2)
        try:
            paths.LOCK_DIR.mkdir(parents=True, exist_ok=True)
            fd = os.open(
                _lock_path(run_id), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            continue
        except OSError:
            return run_id
        try:
            os.write(fd, RESERVED + str(os.getpid()).encode() + b"\n")
        finally:
            os.close(fd)
        return run_id
    raise NamingError("no free run id after 64 draws (is /run/afb/locks full of stale locks?)")


def check_run_id(run_id: str) -> str:
    if not _RUN_ID_RE.match(run_id):
        raise NamingError(f"run id must be {RUN_ID_LEN} lowercase hex chars, got {run_id!r}")
    return run_id


def _check_index(n: int) -> int:
    if not 0 <= n <= MAX_INDEX:
        raise NamingError(f"index must be within 0..{MAX_INDEX}, got {n}")
    return n


def container_name(run_id: str, suffix: str) -> str:
    name = f"{PREFIX}-{check_run_id(run_id)}-{suffix}"
    if not _CONTAINER_RE.match(name):
        raise NamingError(f"bad container suffix {suffix!r}")
    return name


def netns_name(run_id: str, n: int) -> str:
    return f"{PREFIX}-{check_run_id(run_id)}-{_check_index(n)}"


def veth_names(run_id: str, n: int) -> tuple[str, str]:
    """(host side, agent/namespace side) veth names; both fit IFNAMSIZ."""
    base = f"{PREFIX}{check_run_id(run_id)}"
    host, agent = f"{base}h{_check_index(n)}", f"{base}a{n}"
    assert len(host) <= IFNAMSIZ_MAX and len(agent) <= IFNAMSIZ_MAX
    return host, agent


def nft_table_name(run_id: str, n: int) -> str:
    """Table name; the table lives in the `inet` family."""
    return f"{PREFIX}_{check_run_id(run_id)}_{_check_index(n)}"


def parse_name(name: str) -> ParsedName | None:
    """Recognise any of our names; None for anything that is not ours."""
    if m := _NETNS_RE.match(name):
        return ParsedName("netns", m["run"], int(m["n"]))
    if m := _CONTAINER_RE.match(name):
        return ParsedName("container", m["run"], None, suffix=m["suffix"])
    if m := _VETH_RE.match(name):
        return ParsedName("veth", m["run"], int(m["n"]), side=m["side"])
    if m := _NFT_RE.match(name):
        return ParsedName("nft", m["run"], int(m["n"]))
    return None


def parse_as(kind: str, name: str) -> ParsedName | None:
    """Like parse_name but only accepts the given kind.

    Netns and container names overlap (`afb-<run>-<digits>`), so callers that know
    what they are looking at use this.
    """
    if kind == "container":
        m = _CONTAINER_RE.match(name)
        return ParsedName("container", m["run"], None, suffix=m["suffix"]) if m else None
    p = parse_name(name)
    return p if p is not None and p.kind == kind else None


def matches_filter(run_id: str, prefix_filter: str | None) -> bool:
    """`prefix_filter` selects run ids by prefix (e.g. a whole run id); None = every run."""
    return prefix_filter is None or run_id.startswith(prefix_filter)


# --- liveness lock ---------------------------------------------------------------------------


def _lock_path(run_id: str) -> Path:
    return paths.LOCK_DIR / f"{check_run_id(run_id)}.lock"


SWEEPER = b"sweep\n"  # what a sweep writes into a lock it holds (hold_run waits for it)
RESERVED = b"reserved "  # + the pid of the process that drew the id, until hold_run takes it
SWEEP_WAIT_S = 120.0  # how long hold_run waits for a sweep of the same run id to finish


def lock_run(run_id: str, *, wait_for_sweeper: float = 0.0) -> int | None:
    """Take the run's lock (flock on its lock file, re-checked against unlinking): the fd, or
    None when another process holds it. While the holder is a sweep, retry up to
    `wait_for_sweeper` seconds."""
    paths.LOCK_DIR.mkdir(parents=True, exist_ok=True)
    path = _lock_path(run_id)
    deadline = time.monotonic() + wait_for_sweeper
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sweeping = os.pread(fd, len(SWEEPER), 0) == SWEEPER
            os.close(fd)
            if sweeping and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # unlinked (a run that ended, a sweep) between open and flock: again


@contextlib.contextmanager
def hold_run(run_id: str) -> Iterator[None]:
    """Mark a run as live for its duration (flock); sweep leaves live runs alone. A run whose
    id is being swept waits for the sweep; a run held by another live process raises
    BlockingIOError at once."""
    fd = lock_run(check_run_id(run_id), wait_for_sweeper=SWEEP_WAIT_S)
    if fd is None:
        raise BlockingIOError(f"run {run_id} is live in another process")
    os.ftruncate(fd, 0)  # a live run's lock: not a sweeper's (one killed mid-sweep wrote it)
    path = _lock_path(run_id)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def run_is_live(run_id: str) -> bool:
    """True when some process holds the run's lock (flock conflicts even within one process)."""
    path = _lock_path(run_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
