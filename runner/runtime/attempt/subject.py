"""The subject processes of one attempt: launch unprivileged in the attempt's netns, relaunch.

Each attempt's subject runs as its own uid (`subject_uid`: a fixed base + the attempt's netns
index, unique among live attempts; no passwd entry needed), so one attempt's subject cannot read
another's state directory (0700, owned by that uid), nor signal or ptrace its processes.

The registry is also the `process_registry` collector's source (sigkill witness): it knows the
current subject and keeps every process it launched (a list, not a map by pid: a relaunch may get
the pid of a process this run already reaped).

Privilege drop: `ip netns exec NS env -C STATE setpriv --reuid=UID ... -- argv`; `ip`, `env`
and `setpriv` all exec in place, so the launched pid is the subject itself, and it runs with no
capabilities, no bounding set and no_new_privs, unable to touch the root-only run directory.

Hidden paths (issue 23): the host filesystem stays visible to the subject except the
`hidden_paths` the orchestration passes down (the task folders, the model cassettes, the
published evidence: `runner.runtime.executor.hidden_paths`): each is covered by an empty
read-only tmpfs in the subject's own mount namespace before the privilege drop
(`SubjectLauncher.launch(masks=...)`); a mask that fails fails the launch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.runtime.host.procs import ExitStatus, Subject, SubjectLauncher

NOBODY_UID = 65534
NOBODY_GID = 65534
SUBJECT_UID_BASE = 1_600_000_000  # far above login and subordinate (podman) id ranges


def subject_uid(netns_index: int | None) -> int:
    """The uid (and gid) of an attempt's subject: unique per live attempt."""
    if netns_index is None:
        return NOBODY_UID
    return SUBJECT_UID_BASE + netns_index


def prepare_state_dir(path: Path, uid: int = NOBODY_UID, gid: int = NOBODY_GID) -> Path:
    """A fresh directory owned by the subject's user (0700); its parent stays root's."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, mode=0o700)
    os.chown(path, uid, gid)
    return path


def drop_privileges(argv: Sequence[str], uid: int = NOBODY_UID, gid: int = NOBODY_GID) -> list[str]:
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *argv,
    ]


class SubjectRegistry:
    """Launches the subject and remembers every process; thread-safe."""

    def __init__(
        self,
        launcher: SubjectLauncher,
        argv: Sequence[str],
        *,
        state_dir: Path,
        netns: str,
        env: Mapping[str, str],
        uid: int = NOBODY_UID,
        gid: int = NOBODY_GID,
        hidden_paths: Sequence[Path] = (),
    ) -> None:
        self.launcher = launcher
        self.hidden_paths = tuple(hidden_paths)
        self.uid, self.gid = uid, gid
        self.argv = list(argv)
        self.state_dir = state_dir
        self.netns = netns
        self.env = dict(env)
        self._lock = threading.Condition()
        self._current: Subject | None = None
        self._all: list[Subject] = []
        self._pending = False
        self._relaunch = False
        self.reasons: list[str] = []

    def launch(self, restart_index: int) -> Subject:
        env = {**self.env, "AFB_RESTART_INDEX": str(restart_index)}
        subject = self.launcher.launch(
            drop_privileges(self.argv, self.uid, self.gid),
            state_dir=self.state_dir,
            netns=self.netns,
            env=env,
            masks=self.hidden_paths,  # every relaunch too
        )
        with self._lock:
            self._current = subject
            self._all.append(subject)
            self._pending = self._relaunch = False
        return subject

    def current(self) -> Subject | None:
        with self._lock:
            return self._current

    def expect_relaunch(self) -> None:
        """An actuator is about to kill the subject; a recovery decision will follow."""
        with self._lock:
            self._pending = True

    def request_relaunch(self, reason: str) -> None:
        with self._lock:
            self._pending, self._relaunch = False, True
            self.reasons.append(reason)
            self._lock.notify_all()

    def decline_relaunch(self, reason: str) -> None:
        """The fault was not witnessed: the attempt stops, the subject is not relaunched."""
        with self._lock:
            self._pending, self._relaunch = False, False
            self.reasons.append(reason)
            self._lock.notify_all()

    def relaunch_requested(self, timeout: float) -> bool | None:
        """After an exit: True to relaunch, False not; None when a pending decision timed out."""
        with self._lock:
            if not self._lock.wait_for(lambda: not self._pending, timeout):
                return None
            return self._relaunch

    def stop_all(self, timeout: float = 10.0) -> list[ExitStatus]:
        """Kill whatever is still running (teardown); returns the statuses reaped here."""
        with self._lock:
            subjects = list(self._all)
        out: list[ExitStatus] = []
        for s in subjects:
            if s.status is None:
                with contextlib.suppress(ProcessLookupError):
                    s.kill()
                with contextlib.suppress(TimeoutError):
                    out.append(s.wait(timeout))
            s.close()
        return out
