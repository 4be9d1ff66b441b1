"""Backend conformance suite: every sandbox backend must pass these against the real thing.

Add a backend by extending `BACKENDS` and `_make_backend`.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from runner.runtime.host import naming
from runner.runtime.host.podman_service import PodmanService
from runner.runtime.sandbox.base import (
    ExecTimeout,
    Sandbox,
    SandboxError,
    SandboxIdentity,
    SandboxSpec,
)
from runner.runtime.sandbox.podman import PodmanSandbox

pytestmark = pytest.mark.runtime

BACKENDS = ["podman"]
MakeSandbox = Callable[..., Sandbox]


@pytest.fixture(params=BACKENDS)
def make_sandbox(
    request: pytest.FixtureRequest, session_run_id: str, test_image: str
) -> Iterator[MakeSandbox]:
    created: list[Sandbox] = []
    counter = iter(range(10_000))

    def make(start: bool = True, **spec_kw: object) -> Sandbox:
        spec = SandboxSpec(
            run_id=session_run_id,
            name_suffix=f"conf{os.getpid()}x{next(counter)}",
            image=test_image,
            **spec_kw,  # type: ignore[arg-type]
        )
        if request.param == "podman":
            svc: PodmanService = request.getfixturevalue("podman_service")
            sb: Sandbox = PodmanSandbox(svc.url, spec)
        else:  # pragma: no cover - future backends
            raise AssertionError(request.param)
        created.append(sb)
        sb.create()
        if start:
            sb.start()
        return sb

    yield make
    for sb in created:
        sb.remove()


def _wait_not_running(sb: Sandbox, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while sb.is_running():
        assert time.monotonic() < deadline, "sandbox still running"
        time.sleep(0.05)


def test_create_start_identity(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    assert sb.is_running()
    ident = sb.identity()
    assert isinstance(ident, SandboxIdentity)
    assert ident.init_pid > 0 and ident.container_id and ident.started_at
    assert len(ident.boot_token) == 36
    assert sb.identity() == ident  # stable while nothing happens


def test_create_without_start_is_not_running(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(start=False)
    assert not sb.is_running()
    sb.start()
    assert sb.is_running()


def test_exec_exit_codes_and_streams(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    r = sb.exec(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr) == (3, b"out", b"err")
    assert sb.exec(["true"]).exit_code == 0
    assert sb.exec(["false"]).exit_code == 1
    assert sb.exec(["sh", "-c", "kill -9 $$"]).exit_code == 137
    assert sb.exec(["/nonexistent-binary"]).exit_code in (126, 127)


def test_exec_stdin(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    data = os.urandom(1 << 20)  # bigger than any socket buffer: exercises concurrent write/read
    r = sb.exec(["sh", "-c", "cat; echo done >&2"], stdin=data)
    assert r.exit_code == 0 and r.stderr == b"done\n"
    assert hashlib.sha256(r.stdout).digest() == hashlib.sha256(data).digest()
    assert sb.exec(["cat"], stdin=b"").stdout == b""
    assert sb.exec(["cat"]).stdout == b""  # no stdin attached: EOF at once


def test_exec_timeout_kills_command(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    t0 = time.monotonic()
    with pytest.raises(ExecTimeout) as ei:
        sb.exec(["sh", "-c", "echo started; exec sleep 1000"], timeout=1.5)
    assert time.monotonic() - t0 < 10
    assert b"started" in ei.value.stdout
    deadline = time.monotonic() + 10
    while b"sleep 1000" in sb.exec(["ps", "-o", "args"]).stdout:
        assert time.monotonic() < deadline, "timed-out command still running"
        time.sleep(0.05)


def test_put_and_get_file(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    data = bytes(range(256)) * 64
    sb.put_file("/tmp/blob.bin", data, mode=0o600)
    assert sb.get_file("/tmp/blob.bin") == data
    assert sb.exec(["stat", "-c", "%a %s", "/tmp/blob.bin"]).stdout == f"600 {len(data)}\n".encode()
    sb.exec(["sh", "-c", "printf from-inside > /tmp/in.txt"])
    assert sb.get_file("/tmp/in.txt") == b"from-inside"
    with pytest.raises(SandboxError):
        sb.get_file("/tmp/does-not-exist")


def test_restart_changes_identity_but_keeps_container(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    sb.put_file("/tmp/keep.txt", b"x")
    before = sb.identity()
    sb.restart()
    after = sb.identity()
    assert after.container_id == before.container_id
    assert after.init_pid != before.init_pid
    assert after.started_at != before.started_at
    assert after.boot_token != before.boot_token
    assert sb.get_file("/tmp/keep.txt") == b"x"  # same container filesystem


def test_recreate_changes_container_id(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    sb.put_file("/tmp/gone.txt", b"x")
    before = sb.identity()
    sb.recreate()
    after = sb.identity()
    assert after.container_id != before.container_id
    assert after.init_pid != before.init_pid
    assert after.started_at != before.started_at
    assert after.boot_token != before.boot_token
    with pytest.raises(SandboxError):
        sb.get_file("/tmp/gone.txt")  # fresh filesystem


def test_kill(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    init_pid = sb.identity().init_pid
    sb.kill(signal.SIGKILL)
    _wait_not_running(sb)
    assert not os.path.exists(f"/proc/{init_pid}/status") or "Z" in _state(init_pid)
    with pytest.raises(SandboxError):
        sb.exec(["true"])
    with pytest.raises(SandboxError):
        sb.identity()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except FileNotFoundError:
        return "gone"
    return s[s.rindex(")") + 2]


def test_remove(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    cid = sb.identity().container_id
    sb.remove()
    r = subprocess.run(["podman", "container", "exists", cid], capture_output=True)
    assert r.returncode == 1
    sb.remove()  # idempotent


def test_no_network_inside(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    dev = sb.exec(["cat", "/proc/net/dev"]).stdout.decode().splitlines()[2:]
    assert [line.split(":")[0].strip() for line in dev] == ["lo"]
    # Nothing but loopback is routable: connecting to 198.18.0.1 fails at once.
    r = sb.exec(["sh", "-c", "nc -w 2 198.18.0.1 80 </dev/null"])
    assert r.exit_code != 0


def test_capabilities_dropped(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    for path in ("/proc/1/status", "/proc/self/status"):
        status = sb.exec(["cat", path]).stdout.decode()
        caps = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
        assert int(caps["CapEff"], 16) == 0, (path, caps)
        assert int(caps["CapPrm"], 16) == 0, (path, caps)
    assert "NoNewPrivs:\t1" in sb.exec(["cat", "/proc/1/status"]).stdout.decode()


def test_explicit_ulimits(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(nofile=1024, nproc=2048)
    limits = sb.exec(["cat", "/proc/1/limits"]).stdout.decode()
    assert any(
        ln.split()[3:5] == ["1024", "1024"] for ln in limits.splitlines() if "open files" in ln
    )
    assert any(
        ln.split()[2:4] == ["2048", "2048"] for ln in limits.splitlines() if "processes" in ln
    )


def test_name_and_labels(make_sandbox: MakeSandbox, session_run_id: str) -> None:
    sb = make_sandbox(labels={"afb.role": "tools"})
    cid = sb.identity().container_id
    info = json.loads(
        subprocess.run(
            ["podman", "inspect", cid], check=True, capture_output=True, text=True
        ).stdout
    )[0]
    parsed = naming.parse_as("container", info["Name"])
    assert parsed is not None and parsed.run_id == session_run_id
    assert info["Config"]["Labels"]["afb.run"] == session_run_id
    assert info["Config"]["Labels"]["afb.role"] == "tools"


def test_user_command_runs_as_init(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(command=["sh", "-c", "echo $0-$1 > /tmp/args; exec sleep 1000", "a", "b"])
    ident = sb.identity()  # boot token written before the user command
    assert len(ident.boot_token) == 36
    assert sb.get_file("/tmp/args") == b"a-b\n"
