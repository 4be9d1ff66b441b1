"""Remove leftovers of crashed runs, recognised only by our naming scheme / env marker.

A resource is touched only if its name parses back to a run id (`naming.parse_as`) or, for
processes, its environment holds the exact entry AFB_RUN=<run id>. Runs whose liveness lock
is held (`naming.hold_run`) are skipped unless include_live=True. A run judged dead is locked by
the sweep itself (`naming.lock_run`, marked as a sweeper) until the sweep ends, so a run resumed
meanwhile waits instead of having its fresh resources removed; its lock file then goes too.

Order matters: processes first (so nothing re-creates resources), then every registered sandbox
backend's sandboxes (its `sweep`, by name; Podman's uses the podman CLI: no service needed), then
host nft tables, veths, and namespaces (which take the tables inside them along).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from pydantic import BaseModel, Field

from runner.evaluator.core.errors import InputError
from runner.runtime.host import naming, netns, nft, paths
from runner.runtime.sandbox import registry
from runner.runtime.subjects import environment as subjectenv

# Podman helpers may inherit a service's env; containers are removed via podman instead.
_SPARE_COMMS = frozenset({"conmon", "runc", "crun"})


class SweepReport(BaseModel):
    processes: list[str] = Field(default_factory=list)  # "<pid> <role> <run id>"
    containers: list[str] = Field(default_factory=list)  # sandboxes, of every backend
    nft_tables: list[str] = Field(default_factory=list)
    veths: list[str] = Field(default_factory=list)
    netns: list[str] = Field(default_factory=list)
    state_dirs: list[str] = Field(default_factory=list)
    subject_envs: list[str] = Field(default_factory=list)  # "<path>: <why>" (subjectenv.py)
    locks: list[str] = Field(default_factory=list)  # lock files of dead runs, stale reservations
    skipped_live_runs: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)

    @property
    def removed_anything(self) -> bool:
        return any(
            (self.processes, self.containers, self.nft_tables, self.veths, self.netns,
             self.state_dirs, self.subject_envs, self.locks)
        )  # fmt: skip


class _Selector:
    def __init__(self, prefix_filter: str | None, include_live: bool, report: SweepReport):
        self.prefix_filter, self.include_live, self.report = prefix_filter, include_live, report
        self._live: dict[str, bool] = {}
        self._held: dict[str, int] = {}  # run id -> lock fd held by this sweep

    def wants(self, run_id: str) -> bool:
        if not naming.matches_filter(run_id, self.prefix_filter):
            return False
        if run_id not in self._live:
            fd = naming.lock_run(run_id)
            if fd is not None:  # dead: ours until the sweep ends
                os.pwrite(fd, naming.SWEEPER, 0)
                self._held[run_id] = fd
            self._live[run_id] = fd is None
            if fd is None and not self.include_live:
                self.report.skipped_live_runs.append(run_id)
        return self.include_live or not self._live[run_id]

    def release(self) -> None:
        """Drop every dead run's lock file (the run is gone, its leftovers with it)."""
        for run_id, fd in sorted(self._held.items()):
            path = paths.LOCK_DIR / f"{run_id}.lock"
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                self.report.locks.append(str(path))
            os.close(fd)
        self._held.clear()


def _marker(pid: int) -> tuple[str, str] | None:
    """(run id, role) from /proc/<pid>/environ if it carries our marker."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    env = dict(e.split(b"=", 1) for e in raw.split(b"\0") if b"=" in e)
    run = env.get(naming.ENV_RUN.encode())
    if run is None:
        return None
    try:
        run_id = naming.check_run_id(run.decode())
    except (naming.NamingError, UnicodeDecodeError):
        return None
    return run_id, env.get(naming.ENV_ROLE.encode(), b"").decode(errors="replace")


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return out


def _sweep_processes(sel: _Selector, report: SweepReport) -> None:
    spare = _ancestors()
    victims: list[tuple[int, int, str, str]] = []  # pid, pidfd, role, run
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spare:
            continue
        pid = int(entry.name)
        found = _marker(pid)
        if found is None or not sel.wants(found[0]):
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() in _SPARE_COMMS:
                continue
            pidfd = os.pidfd_open(pid)
            if _marker(pid) != found:  # pid recycled between scan and pidfd_open
                os.close(pidfd)
                continue
            victims.append((pid, pidfd, found[1], found[0]))
    # Backend services get SIGTERM first so they can tidy up; subjects are killed outright.
    services = registry.service_roles()
    for _pid, pidfd, role, _ in victims:
        sig = signal.SIGTERM if role in services else signal.SIGKILL
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, sig)
    deadline = time.monotonic() + 10
    for pid, pidfd, role, run in victims:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
        report.processes.append(f"{pid} {role or '?'} {run}")


def _alive(pid: int) -> bool:
    """Running and not a zombie (a zombie of a crashed runner is reaped by init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _sweep_sandboxes(sel: _Selector, report: SweepReport) -> None:
    """Each registered backend removes the sandboxes of the runs the selector wants."""
    for name in registry.registered():
        result = registry.backend(name).sweep(sel.wants)
        report.containers += result.removed
        report.errors += [f"{name}: {e}" for e in result.errors]


def _sweep_network(sel: _Selector, report: SweepReport) -> None:
    try:
        tables = nft.list_tables()
    except nft.NftError as e:
        report.errors.append(str(e))
        tables = []
    for family, name in tables:
        parsed = naming.parse_as("nft", name)
        if parsed is not None and sel.wants(parsed.run_id):
            try:
                nft.delete_table(family, name)
                report.nft_tables.append(f"{family} {name}")
            except nft.NftError as e:
                report.errors.append(str(e))
    for link in netns.host_links():
        parsed = naming.parse_as("veth", link)
        if parsed is not None and sel.wants(parsed.run_id):
            try:
                if netns.delete_link(link):
                    report.veths.append(link)
            except Exception as e:  # a peer removed concurrently with its pair
                report.errors.append(f"veth {link}: {e}")
    for ns in netns.list_netns():
        parsed = naming.parse_as("netns", ns)
        if parsed is not None and sel.wants(parsed.run_id):
            try:
                netns.remove_netns(ns)
                report.netns.append(ns)
            except OSError as e:
                report.errors.append(f"netns {ns}: {e}")


def sweep(
    prefix_filter: str | None = None, *, include_live: bool = False, subject_envs: bool = False
) -> SweepReport:
    """Remove our leftovers whose run id starts with prefix_filter (None = every run id).

    Never touches anything whose name/marker does not parse as ours. Without a filter it also
    removes subject environments whose build never finished, and with `subject_envs` those
    whose project changed since (runner/runtime/subjects/environment.py).
    """
    report = SweepReport()
    sel = _Selector(prefix_filter, include_live, report)
    try:
        _sweep_processes(sel, report)
        _sweep_sandboxes(sel, report)
        _sweep_network(sel, report)
        _sweep_state_dirs(sel, report)
        _sweep_stale_locks(sel)
        if prefix_filter is None:
            try:
                report.subject_envs = subjectenv.sweep_environments(stale=subject_envs)
            except (OSError, InputError) as e:
                report.errors.append(f"subject environments: {e}")
    finally:
        sel.release()
    return report


STALE_LOCK_S = 600  # an unheld lock file this old is a leftover (a reservation lasts seconds)


def _sweep_stale_locks(sel: _Selector) -> None:
    """Lock files of runs that died before creating anything, and unused reservations."""
    if not paths.LOCK_DIR.is_dir():
        return
    now = time.time()
    for path in sorted(paths.LOCK_DIR.glob("*.lock")):
        try:
            run_id = naming.check_run_id(path.name.removesuffix(".lock"))
            old = now - path.stat().st_mtime > STALE_LOCK_S
        except (ValueError, FileNotFoundError):
            continue  # not a run's lock (e.g. the netns allocation lock), or gone
        if old or run_id in sel._held or _abandoned_reservation(path):
            sel.wants(run_id)  # locks it when dead; release() removes the file


def _abandoned_reservation(path: Path) -> bool:
    """A lock file that `new_run_id` reserved for a process that has since exited."""
    try:
        head = path.read_bytes()[:64]
    except OSError:
        return False
    if not head.startswith(naming.RESERVED):
        return False
    pid = head[len(naming.RESERVED) :].strip()
    return pid.isdigit() and not Path(f"/proc/{int(pid)}").exists()


# folders of per-run directories
STATE_ROOTS = (paths.SUBJECT_ROOT, paths.SANDBOX_ROOT, paths.LEGACY_PODMAN_ROOT)


def _sweep_state_dirs(sel: _Selector, report: SweepReport) -> None:
    """Per-run directories of crashed runs (named by run id; normal exits remove them)."""
    for d in sorted(p for root in STATE_ROOTS if root.is_dir()
                    for p in root.iterdir()):  # fmt: skip
        try:
            run_id = naming.check_run_id(d.name)
        except ValueError:
            continue  # not one of ours
        if d.is_dir() and not d.is_symlink() and sel.wants(run_id):
            shutil.rmtree(d, ignore_errors=True)
            report.state_dirs.append(str(d))
