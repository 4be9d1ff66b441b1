"""What every sandbox backend must do, checked against the real thing (`bench selftest --sandbox
NAME`; tests/runtime/test_sandbox_conformance.py runs it for every registered backend).

`CHECKS` is a list of named checks; each takes a `Harness` (the backend's service running under a
held run id, making sandboxes from the busybox test image) and raises on failure
(`ConformanceFailure`, or whatever the backend raised). `run_suite` runs them one by one, each
with its sandboxes removed afterwards, and returns one `CheckResult` per check.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from runner.runtime.host import naming, paths
from runner.runtime.sandbox import registry, testimage
from runner.runtime.sandbox.base import (
    ExecTimeout,
    Sandbox,
    SandboxError,
    SandboxIdentity,
    SandboxSpec,
)


class ConformanceFailure(AssertionError):
    """A backend did not do what the interface promises."""


def expect(ok: object, why: str) -> None:
    if not ok:
        raise ConformanceFailure(why)


def expect_raises(kind: type[BaseException], what: str, fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except kind as exc:
        return exc
    raise ConformanceFailure(f"{what}: no {kind.__name__} raised")


class Harness:
    """One backend's service, started under a held run id; makes sandboxes and removes them."""

    def __init__(self, backend: registry.Backend, run_id: str, image: str) -> None:
        self.backend, self.run_id, self.image = backend, run_id, image
        self.service: registry.SandboxService
        self._made: list[Sandbox] = []
        self._counter = iter(range(100_000))
        self.other_run_ids: list[str] = []

    def other_run_id(self) -> str:
        """A fresh run id of no live run (a "crashed" one); its reservation goes at teardown."""
        self.other_run_ids.append(naming.new_run_id())
        return self.other_run_ids[-1]

    def make(self, start: bool = True, run_id: str | None = None, **spec_kw: object) -> Sandbox:
        spec = SandboxSpec(
            run_id=run_id or self.run_id,
            name_suffix=f"conf{os.getpid()}x{next(self._counter)}",
            image=self.image,
            **spec_kw,
        )
        sb = self.service.sandbox(spec)
        self._made.append(sb)
        sb.create()
        if start:
            sb.start()
        return sb

    def cleanup(self) -> list[str]:
        """Remove every sandbox made since the last cleanup; the problems met."""
        problems = []
        made, self._made = self._made, []
        for sb in made:
            try:
                sb.remove()
                sb.close()
            except Exception as exc:
                problems.append(f"remove {sb.name}: {exc}")
        return problems


@contextlib.contextmanager
def harness(backend: registry.Backend, image: str | None = None) -> Iterator[Harness]:
    """The backend's service for one suite run, under a fresh held run id; torn down after."""
    image = image or testimage.ensure_test_image(backend.images())[0]
    run_id = naming.new_run_id()
    state = paths.SANDBOX_ROOT / run_id  # per-run state: `bench sweep` removes it after a crash
    h = Harness(backend, run_id, image)
    try:
        with naming.hold_run(run_id), backend.service(run_id, state) as service:
            h.service = service
            try:
                yield h
            finally:
                h.cleanup()
    finally:
        shutil.rmtree(state, ignore_errors=True)
        for rid in h.other_run_ids:
            with contextlib.suppress(BlockingIOError), naming.hold_run(rid):
                pass  # taking and leaving the lock removes the reservation's lock file


# --- the checks ----------------------------------------------------------------------------------


def _wait_not_running(sb: Sandbox, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while sb.is_running():
        expect(time.monotonic() < deadline, f"{sb.name} still running {timeout} s after kill")
        time.sleep(0.05)


def create_start_identity(h: Harness) -> None:
    sb = h.make()
    expect(sb.is_running(), "not running after start")
    ident = sb.identity()
    expect(isinstance(ident, SandboxIdentity), f"identity() returned {type(ident).__name__}")
    expect(ident.init_pid > 0, f"init pid {ident.init_pid}")
    expect(ident.container_id and ident.started_at, f"empty id or start time: {ident}")
    expect(len(ident.boot_token) == 36, f"boot token {ident.boot_token!r} is not a uuid")
    expect(sb.identity() == ident, "identity changed while nothing happened")


def create_without_start_is_not_running(h: Harness) -> None:
    sb = h.make(start=False)
    expect(not sb.is_running(), "running before start")
    sb.start()
    expect(sb.is_running(), "not running after start")


def exec_exit_codes_and_streams(h: Harness) -> None:
    sb = h.make()
    r = sb.exec(["sh", "-c", "printf out; printf err >&2; exit 3"])
    got = (r.exit_code, r.stdout, r.stderr)
    expect(got == (3, b"out", b"err"), f"(exit, stdout, stderr) = {got!r}, want (3, out, err)")
    expect(sb.exec(["true"]).exit_code == 0, "`true` did not exit 0")
    expect(sb.exec(["false"]).exit_code == 1, "`false` did not exit 1")
    code = sb.exec(["sh", "-c", "kill -9 $$"]).exit_code
    expect(code == 137, f"a SIGKILLed command exited {code}, want 137")
    code = sb.exec(["/nonexistent-binary"]).exit_code
    expect(code in (126, 127), f"a missing binary exited {code}, want 126 or 127")


def exec_stdin(h: Harness) -> None:
    sb = h.make()
    data = os.urandom(1 << 20)  # bigger than any socket buffer: exercises concurrent write/read
    r = sb.exec(["sh", "-c", "cat; echo done >&2"], stdin=data)
    expect(r.exit_code == 0 and r.stderr == b"done\n", f"exit {r.exit_code}, stderr {r.stderr!r}")
    same = hashlib.sha256(r.stdout).digest() == hashlib.sha256(data).digest()
    expect(same, f"1 MiB of stdin came back as {len(r.stdout)} other bytes")
    expect(sb.exec(["cat"], stdin=b"").stdout == b"", "empty stdin: output not empty")
    expect(sb.exec(["cat"]).stdout == b"", "no stdin attached: output not empty")


def exec_timeout_kills_command(h: Harness) -> None:
    sb = h.make()
    t0 = time.monotonic()
    exc = expect_raises(
        ExecTimeout,
        "a command outliving its timeout",
        lambda: sb.exec(["sh", "-c", "echo started; exec sleep 1000"], timeout=1.5),
    )
    expect(time.monotonic() - t0 < 10, "the timeout took more than 10 s to act")
    assert isinstance(exc, ExecTimeout)
    expect(b"started" in exc.stdout, f"partial output lost: {exc.stdout!r}")
    deadline = time.monotonic() + 10
    while b"sleep 1000" in sb.exec(["ps", "-o", "args"]).stdout:
        expect(time.monotonic() < deadline, "the timed-out command is still running")
        time.sleep(0.05)


def put_and_get_file(h: Harness) -> None:
    sb = h.make()
    data = bytes(range(256)) * 64
    sb.put_file("/tmp/blob.bin", data, mode=0o600)
    expect(sb.get_file("/tmp/blob.bin") == data, "get_file returned other bytes than put_file")
    st = sb.exec(["stat", "-c", "%a %s", "/tmp/blob.bin"]).stdout
    expect(st == f"600 {len(data)}\n".encode(), f"mode and size inside: {st!r}")
    sb.exec(["sh", "-c", "printf from-inside > /tmp/in.txt"])
    expect(sb.get_file("/tmp/in.txt") == b"from-inside", "a file written inside reads otherwise")
    expect_raises(SandboxError, "get_file of a missing file", lambda: sb.get_file("/tmp/nope"))


def restart_changes_identity_but_keeps_container(h: Harness) -> None:
    sb = h.make()
    sb.put_file("/tmp/keep.txt", b"x")
    before = sb.identity()
    sb.restart()
    after = sb.identity()
    expect(after.container_id == before.container_id, "restart changed the container id")
    expect(after.init_pid != before.init_pid, "restart kept the init pid")
    expect(after.started_at != before.started_at, "restart kept the start time")
    expect(after.boot_token != before.boot_token, "restart kept the boot token")
    expect(sb.get_file("/tmp/keep.txt") == b"x", "restart lost the container's filesystem")


def recreate_changes_container_id(h: Harness) -> None:
    sb = h.make()
    sb.put_file("/tmp/gone.txt", b"x")
    before = sb.identity()
    sb.recreate()
    after = sb.identity()
    expect(after.container_id != before.container_id, "recreate kept the container id")
    expect(after.init_pid != before.init_pid, "recreate kept the init pid")
    expect(after.started_at != before.started_at, "recreate kept the start time")
    expect(after.boot_token != before.boot_token, "recreate kept the boot token")
    expect_raises(SandboxError, "a file from before recreate", lambda: sb.get_file("/tmp/gone.txt"))


def kill(h: Harness) -> None:
    sb = h.make()
    sb.identity()
    sb.kill(signal.SIGKILL)
    _wait_not_running(sb)
    expect_raises(SandboxError, "exec in a killed sandbox", lambda: sb.exec(["true"]))
    expect_raises(SandboxError, "identity of a killed sandbox", sb.identity)


def remove(h: Harness) -> None:
    run_id = h.other_run_id()  # its own: the sweep below may look at nothing else
    sb = h.make(run_id=run_id)
    sb.remove()
    expect_raises(SandboxError, "exec in a removed sandbox", lambda: sb.exec(["true"]))
    sb.remove()  # idempotent
    left = h.backend.sweep(lambda rid: rid == run_id)
    expect(left.removed == [], f"remove() left {left.removed} for the sweep")


def sweep_removes_by_run_name(h: Harness) -> None:
    crashed = h.other_run_id()
    dead = h.make(run_id=crashed)
    live = h.make()
    expect(naming.parse_as("container", dead.name) is not None, f"{dead.name!r} is not ours")
    result = h.backend.sweep(lambda rid: rid == crashed)
    expect(result.errors == [], f"sweep errors: {result.errors}")
    expect(result.removed == [dead.name], f"sweep removed {result.removed}, want [{dead.name}]")
    expect_raises(SandboxError, "exec in a swept sandbox", lambda: dead.exec(["true"]))
    expect(live.is_running(), "the sweep of another run id stopped a live sandbox")


def no_network_inside(h: Harness) -> None:
    sb = h.make()
    dev = sb.exec(["cat", "/proc/net/dev"]).stdout.decode().splitlines()[2:]
    links = [line.split(":")[0].strip() for line in dev]
    expect(links == ["lo"], f"network links inside: {links}, want only lo")
    # Nothing but loopback is routable: connecting to 198.18.0.1 fails at once.
    r = sb.exec(["sh", "-c", "nc -w 2 198.18.0.1 80 </dev/null"])
    expect(r.exit_code != 0, "a connection out of the sandbox succeeded")


def capabilities_dropped(h: Harness) -> None:
    sb = h.make()
    for path in ("/proc/1/status", "/proc/self/status"):
        status = sb.exec(["cat", path]).stdout.decode()
        caps = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
        expect(int(caps.get("CapEff", "1"), 16) == 0, f"{path}: effective capabilities {caps}")
        expect(int(caps.get("CapPrm", "1"), 16) == 0, f"{path}: permitted capabilities {caps}")
    status = sb.exec(["cat", "/proc/1/status"]).stdout.decode()
    expect("NoNewPrivs:\t1" in status, "init may gain privileges (NoNewPrivs is not 1)")


def explicit_ulimits(h: Harness) -> None:
    sb = h.make(nofile=1024, nproc=2048)
    limits = sb.exec(["cat", "/proc/1/limits"]).stdout.decode().splitlines()
    files = [ln.split()[3:5] for ln in limits if "open files" in ln]
    procs = [ln.split()[2:4] for ln in limits if "processes" in ln]
    expect(files == [["1024", "1024"]], f"open files limit {files}, want 1024 1024")
    expect(procs == [["2048", "2048"]], f"processes limit {procs}, want 2048 2048")


def user_command_runs_as_init(h: Harness) -> None:
    sb = h.make(command=["sh", "-c", "echo $0-$1 > /tmp/args; exec sleep 1000", "a", "b"])
    ident = sb.identity()  # boot token written before the user command
    expect(len(ident.boot_token) == 36, f"boot token {ident.boot_token!r}")
    got = sb.get_file("/tmp/args")
    expect(got == b"a-b\n", f"the user command saw arguments {got!r}, want a-b")


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Harness], None]


CHECKS: tuple[Check, ...] = tuple(
    Check(f.__name__, f)
    for f in (
        create_start_identity,
        create_without_start_is_not_running,
        exec_exit_codes_and_streams,
        exec_stdin,
        exec_timeout_kills_command,
        put_and_get_file,
        restart_changes_identity_but_keeps_container,
        recreate_changes_container_id,
        kill,
        remove,
        sweep_removes_by_run_name,
        no_network_inside,
        capabilities_dropped,
        explicit_ulimits,
        user_command_runs_as_init,
    )
)


def check_names() -> tuple[str, ...]:
    return tuple(c.name for c in CHECKS)


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    error: str | None  # "<exception type>: <message>" of a failure
    seconds: float


def run_check(h: Harness, check: Check) -> CheckResult:
    t0 = time.monotonic()
    error = None
    try:
        check.run(h)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else traceback.format_exc(limit=3)
    problems = h.cleanup()
    if error is None and problems:
        error = "; ".join(problems)
    return CheckResult(check.name, error is None, error, round(time.monotonic() - t0, 2))


def run_suite(
    backend: registry.Backend | str,
    *,
    only: Iterable[str] | None = None,
    image: str | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run the checks (all, or those named in `only`) against the backend, in order."""
    b = registry.backend(backend) if isinstance(backend, str) else backend
    wanted = set(only) if only is not None else None
    unknown = sorted((wanted or set()) - set(check_names()))
    if unknown:
        raise ValueError(f"unknown conformance check(s) {unknown}; known: {list(check_names())}")
    results = []
    with harness(b, image) as h:
        for check in CHECKS:
            if wanted is None or check.name in wanted:
                results.append(run_check(h, check))
                if on_result is not None:
                    on_result(results[-1])
    return results
