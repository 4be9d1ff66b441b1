"""Subject launcher and the single reaper that owns waitpid for launched children.

Why pidfds: the reaper must never call waitpid(-1) (that would steal the exit status of
every other child of this Python process, e.g. subprocess.run's), and signals must never hit
a recycled pid. So each child gets a pidfd; the reaper thread polls those pidfds and calls
waitpid(pid) only for a child whose pidfd says it exited, recording the exact raw status.
Kills go through pidfd_send_signal for the same reason.

Why a `Watch` per child, never a lookup by pid: a run's one reaper outlives thousands of
processes and pids wrap (pid_max is 32768 on many hosts), so a later subject can get the pid of
an earlier one. An exit status kept by pid then answered for the wrong process: a relaunched
subject was "reaped" the moment it started, with its predecessor's exit 0, and a SIGKILL
witness could read another process's signal 9. Each status lives on the Watch of the one
process it belongs to.

Launch: os.posix_spawn (no fork of a threaded interpreter, and no subprocess.Popen, whose own
waitpid bookkeeping would race the reaper) of
`ip netns exec <ns> env -C <state_dir> argv...`. Both `ip` (non-batch mode) and `env` exec in
place, so the spawned pid *is* the subject; tests verify its netns and cmdline.

Masks (issue 23, an agent never sees the answer): `ip netns exec` also gives the child a new
mount namespace (iproute2's netns_switch: unshare(CLONE_NEWNS), then / made MS_SLAVE|MS_REC;
it stays private where the host's / already is), so a mount made there never reaches the
host. With `masks`, a small `sh -c` prefix (still root, before the subject's own argv drops
privileges) mounts an empty read-only tmpfs over each existing masked directory, then execs
the rest in place: the spawned pid is still the subject. It reports "masked" on a pipe (fd 3,
closed before the exec, so the subject cannot forge it); launch() waits for that line, and a
mask that failed (no line) is a ProcError: the subject never ran with the answer visible.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from runner.runtime.host import naming

SUBJECT_ROLE = "subject"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ProcError(RuntimeError):
    pass


class ProcessIdentity(BaseModel):
    """pid + kernel start time (clock ticks since boot, /proc/<pid>/stat field 22)."""

    model_config = ConfigDict(frozen=True)
    pid: int
    start_time: str


class ExitStatus(BaseModel):
    """A child's exit as read by the reaper's waitpid (raw status kept verbatim)."""

    model_config = ConfigDict(frozen=True)
    pid: int
    raw_status: int
    signaled: bool
    term_signal: int | None
    exited: bool
    exit_code: int | None
    core_dumped: bool

    @classmethod
    def from_raw(cls, pid: int, raw: int) -> ExitStatus:
        signaled, exited = os.WIFSIGNALED(raw), os.WIFEXITED(raw)
        return cls(
            pid=pid,
            raw_status=raw,
            signaled=signaled,
            term_signal=os.WTERMSIG(raw) if signaled else None,
            exited=exited,
            exit_code=os.WEXITSTATUS(raw) if exited else None,
            core_dumped=signaled and os.WCOREDUMP(raw),
        )


def read_start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat. comm (field 2) may hold spaces: split after the last ')'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError as e:
        raise ProcessLookupError(pid) from e
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]  # fields[0] is field 3 (state)


def process_identity(pid: int) -> ProcessIdentity:
    return ProcessIdentity(pid=pid, start_time=read_start_time(pid))


class Watch:
    """One watched child: its exit status once the reaper has collected it.

    Bound to the process, not to its pid: the pid may belong to another process later, this
    object never does.
    """

    def __init__(self, pid: int, cond: threading.Condition) -> None:
        self.pid = pid
        self._cond = cond
        self._status: ExitStatus | None = None

    @property
    def status(self) -> ExitStatus | None:
        with self._cond:
            return self._status

    def wait(self, timeout: float) -> ExitStatus:
        with self._cond:
            if not self._cond.wait_for(lambda: self._status is not None, timeout):
                raise TimeoutError(f"pid {self.pid} did not exit within {timeout}s")
            assert self._status is not None
            return self._status

    def _set(self, status: ExitStatus) -> None:  # the reaper thread, holding the condition
        self._status = status
        self._cond.notify_all()


class Reaper:
    """One thread; the only caller of waitpid for children registered with `watch`."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending: list[tuple[Watch, int]] = []  # (watch, pidfd) to register
        self._live: dict[int, Watch] = {}  # pid -> the watch of its current, unreaped owner
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="afb-reaper", daemon=True)

    def start(self) -> Reaper:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(10)
        self._sel.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self) -> Reaper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def watch(self, pid: int) -> Watch:
        """Take ownership of a child's exit status. Must be our child, not yet reaped.

        A pid still watched and not reaped cannot have a new owner (the kernel reuses a pid
        only once it is reaped), so watching it twice is a bug and is refused.
        """
        pidfd = os.pidfd_open(pid)
        with self._lock:
            if pid in self._live:
                os.close(pidfd)
                raise ProcError(f"pid {pid} is already watched and not yet reaped")
            watch = Watch(pid, self._cond)
            self._live[pid] = watch
            self._pending.append((watch, pidfd))
        os.write(self._wake_w, b"x")
        return watch

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stop:
                    return
                pending, self._pending = self._pending, []
            for watch, pidfd in pending:
                self._sel.register(pidfd, selectors.EVENT_READ, watch)
            for key, _ in self._sel.select():
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    continue
                watch, pidfd = key.data, int(key.fd)
                # Reap and forget the pid in one step under the lock: once reaped the pid may
                # be handed to a new child at once, whose watch() must not find it still taken.
                with self._cond:
                    got, raw = os.waitpid(watch.pid, os.WNOHANG)
                    if got == 0:
                        continue  # spurious wake-up
                    del self._live[watch.pid]
                    watch._set(ExitStatus.from_raw(watch.pid, raw))
                self._sel.unregister(pidfd)
                os.close(pidfd)


class Subject:
    """A launched process. Holds its own pidfd so kill() can never hit a recycled pid, and
    its own `Watch` so wait() can never return another process's exit."""

    def __init__(
        self, identity: ProcessIdentity, watch: Watch, state_dir: Path, pidfd: int
    ) -> None:
        self.identity = identity
        self.pid = identity.pid
        self.state_dir = state_dir
        self._watch = watch
        # Opened before the reaper watches the pid (the launcher passes it in): a child that
        # exits at once may be reaped by then, and a reaped pid has no pidfd (or a new owner).
        self._pidfd: int | None = pidfd

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self._pidfd is None:
            raise ProcError("subject handle closed")
        signal.pidfd_send_signal(self._pidfd, sig)  # ESRCH -> ProcessLookupError once reaped

    def wait(self, timeout: float) -> ExitStatus:
        return self._watch.wait(timeout)

    @property
    def status(self) -> ExitStatus | None:
        return self._watch.status

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


MASK_FD = 3
MASK_OK = b"masked\n"
MASK_TIMEOUT_S = 30.0
# "$@" is: mount dir... -- argv...; a missing dir has nothing to hide; any failed mount stops
# here. `mount` is the harness's absolute path: the subject's env may set PATH (and a relaunch
# runs this as root after the agent had a turn).
MASK_SCRIPT = (
    'mnt="$1"; shift; '
    'while [ "$1" != -- ]; do '
    'if [ -e "$1" ]; then '
    '"$mnt" -t tmpfs -o ro,nosuid,nodev,noexec,size=4k,mode=0555 afb-mask "$1" '
    '|| { echo "afb: cannot mask $1" >&2; exit 125; }; fi; '
    "shift; done; shift; "
    f'printf "masked\\n" >&{MASK_FD} && exec {MASK_FD}>&- && exec "$@"'
)


def _mask_prefix(masks: Sequence[Path]) -> list[str]:
    sh = shutil.which("sh") or "/bin/sh"
    mount = shutil.which("mount") or "/usr/bin/mount"
    return [sh, "-c", MASK_SCRIPT, "afb-mask", mount, *(str(m) for m in masks), "--"]


def _await_masks(fd: int, pid: int) -> None:
    """Read the mask prefix's report; anything but MASK_OK (EOF, timeout) is a ProcError."""
    got = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        deadline = MASK_TIMEOUT_S
        while not got.endswith(b"\n") and sel.select(deadline):
            chunk = os.read(fd, 64)
            if not chunk:
                break
            got += chunk
    if got != MASK_OK:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still ours
        raise ProcError(f"subject {pid}: the masks over hidden paths failed (see stderr.log)")


class SubjectLauncher:
    """Launch subjects inside a named netns with a state dir and an explicit environment."""

    def __init__(self, run_id: str, reaper: Reaper) -> None:
        self.run_id = naming.check_run_id(run_id)
        self.reaper = reaper
        self._ip = shutil.which("ip") or "/usr/sbin/ip"
        self._env = shutil.which("env") or "/usr/bin/env"

    def launch(
        self,
        argv: list[str],
        *,
        state_dir: Path,
        netns: str | None = None,
        env: Mapping[str, str] | None = None,
        masks: Sequence[Path] = (),
    ) -> Subject:
        """Start argv with cwd=state_dir, stdout/stderr to state_dir/{stdout,stderr}.log.

        The environment is explicit (not inherited) and always carries AFB_RUN=<run id>,
        which is how `sweep` recognises our processes after a crash. `masks`: absolute
        directories hidden from the subject under an empty read-only tmpfs (needs `netns`).
        """
        if not argv:
            raise ProcError("empty argv")
        if masks and netns is None:  # no own mount namespace: the mounts would hit the host
            raise ProcError("masks need a netns (its mount namespace)")
        for m in masks:
            if not m.is_absolute():
                raise ProcError(f"mask {m}: not an absolute path")
            if state_dir.resolve().is_relative_to(m.resolve()):
                raise ProcError(f"mask {m} would hide the subject's state dir {state_dir}")
        state_dir.mkdir(parents=True, exist_ok=True)
        full_env = {"PATH": DEFAULT_PATH, "HOME": str(state_dir), **(env or {})}
        full_env |= {
            naming.ENV_RUN: self.run_id,
            naming.ENV_ROLE: SUBJECT_ROLE,
            "AFB_STATE_DIR": str(state_dir),
        }
        prefix = _mask_prefix(masks) if masks else []
        cmd = [self._env, "-C", str(state_dir), *prefix, *argv]
        if netns is not None:
            cmd = [self._ip, "netns", "exec", netns, *cmd]
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        actions: list[tuple[Any, ...]] = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(state_dir / "stdout.log"), flags, 0o644),
            (os.POSIX_SPAWN_OPEN, 2, str(state_dir / "stderr.log"), flags, 0o644),
        ]
        # os.pipe() fds are close-on-exec: only this child gets the write end, as fd 3
        report_r, report_w = os.pipe() if masks else (-1, -1)
        if masks:
            actions.append((os.POSIX_SPAWN_DUP2, report_w, MASK_FD))
        try:
            pid = os.posix_spawn(
                cmd[0],
                cmd,
                full_env,
                file_actions=actions,
                setsid=True,  # own session/process group: terminal signals to us don't reach it
            )
        finally:
            if masks:
                os.close(report_w)
        if masks:
            try:
                _await_masks(report_r, pid)  # before anything else sees the pid
            except ProcError:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)  # never watched: reap it here
                raise
            finally:
                os.close(report_r)
        # Read the identity before the reaper may reap it: a zombie's /proc/<pid>/stat
        # is still there, a reaped pid's is not (or belongs to someone else).
        identity = process_identity(pid)
        pidfd = os.pidfd_open(pid)  # before watch(): nobody reaps it until then
        watch = self.reaper.watch(pid)
        (state_dir / "subject.pid").write_text(f"{pid} {identity.start_time}\n")
        return Subject(identity, watch, state_dir, pidfd)
