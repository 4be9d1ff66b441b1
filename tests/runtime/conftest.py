"""Fixtures for runtime tests: real Podman, namespaces, nftables and processes (root only)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.runtime.host import naming
from runner.runtime.host.podman_service import PodmanService
from runner.runtime.host.procs import Reaper
from runner.runtime.sandbox import testimage


def _runtime_available() -> str | None:
    if os.geteuid() != 0:
        return "runtime tests need root"
    for tool in ("podman", "runc", "nft", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (run scripts/setup-runtime.sh)"
    return None


@pytest.fixture(scope="session", autouse=True)
def _require_runtime() -> None:
    reason = _runtime_available()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def test_image() -> Iterator[str]:
    ref, built = testimage.ensure_test_image()
    yield ref
    if built:
        testimage.remove_image(ref)


@pytest.fixture(scope="session")
def session_run_id() -> Iterator[str]:
    """Run id for this test session, held live so a concurrent sweep leaves it alone."""
    rid = naming.new_run_id()
    with naming.hold_run(rid):
        yield rid


@pytest.fixture
def run_id() -> Iterator[str]:
    rid = naming.new_run_id()
    with naming.hold_run(rid):
        yield rid


@pytest.fixture
def tmp_run_dir() -> Iterator[Path]:
    # Short path under /tmp: AF_UNIX socket paths must stay under 108 bytes.
    d = Path(tempfile.mkdtemp(prefix="afb-t-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def podman_service(session_run_id: str) -> Iterator[PodmanService]:
    d = Path(tempfile.mkdtemp(prefix="afb-s-"))
    with PodmanService(session_run_id, d) as svc:
        yield svc
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    with Reaper() as r:
        yield r


@pytest.fixture
def host_listener() -> Iterator[Callable[[str], socket.socket]]:
    """Open TCP listeners on given local addresses (port 0); closed at teardown."""
    socks: list[socket.socket] = []

    def listen(addr: str) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((addr, 0))
        s.listen(64)
        socks.append(s)
        return s

    yield listen
    for s in socks:
        s.close()


_PROBE = """
import socket, sys
s = socket.socket()
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except OSError as e:
    print("fail", type(e).__name__)
    sys.exit(1)
print("ok")
"""


def tcp_probe(netns: str, host: str, port: int, timeout: float = 1.0) -> bool:
    """TCP connect from inside `netns`; True iff the handshake completes within timeout."""
    r = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", _PROBE, host, str(port), str(timeout)],
        capture_output=True,
        text=True,
        timeout=timeout + 20,
    )
    return r.returncode == 0 and r.stdout.strip() == "ok"
