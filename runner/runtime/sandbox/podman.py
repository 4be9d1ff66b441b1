"""The Podman sandbox backend (podman-py, private socket); the interface is `base.Sandbox`.

Registered as "podman" (the default, `registry.DEFAULT`): the run's service is a private
`podman system service` (host/podman_service.py), the sweep removes containers by name through
the podman CLI (no service needed), images live in the host's Podman store.

Identity for the sandbox_restart witness = container id + init pid + start time (from
inspect) + a boot token. The token is written by our entrypoint wrapper at every start,
tagged with PID 1's /proc starttime, so a reader can tell a token of *this* boot from a
stale one left by the previous boot (restart keeps the container filesystem).

The wrapper uses only shell builtins plus `sleep`, so any image with /bin/sh works.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import podman
from podman.domain.containers import Container
from podman.errors import APIError, NotFound

from runner.runtime.host import naming
from runner.runtime.host.podman_service import SERVICE_ROLE, PodmanService
from runner.runtime.sandbox import registry
from runner.runtime.sandbox.base import (
    ExecResult,
    ExecTimeout,
    SandboxError,
    SandboxIdentity,
    SandboxSpec,
)

BOOT_TOKEN_PATH = "/run/afb-boot-token"
RUN_LABEL = "afb.run"
API_PREFIX = "/v4.0.0/libpod"  # server minimum on Podman 4.x; also accepted by 5.x

# $0 $@ = optional user command, so only builtins (no `set --`) touch positional params.
# Field 22 of /proc/1/stat is PID 1's starttime (comm of sh has no spaces).
_STAT22 = "read -r " + " ".join(f"_{i}" for i in range(1, 22)) + " st _rest < /proc/1/stat"
_BOOT_SCRIPT = (
    f"{_STAT22}; read -r tok < /proc/sys/kernel/random/uuid; "
    f'printf \'%s %s\\n\' "$st" "$tok" > {BOOT_TOKEN_PATH}\n'
)
_IDLE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
# Prints PID 1's starttime then the token line; the reader checks they agree.
_READ_TOKEN = f'{_STAT22}; echo "$st"; if read -r t < {BOOT_TOKEN_PATH}; then echo "$t"; fi'


def _demux(frame_buf: bytearray, out: dict[int, bytearray]) -> None:
    """Consume complete docker raw-stream frames (8-byte header: stream, 0,0,0, size BE32)."""
    while len(frame_buf) >= 8:
        stream, size = frame_buf[0], struct.unpack(">I", frame_buf[4:8])[0]
        if len(frame_buf) < 8 + size:
            return
        out.setdefault(stream, bytearray()).extend(frame_buf[8 : 8 + size])
        del frame_buf[: 8 + size]


class PodmanSandbox:
    """Sandbox = one Podman container: no network, all capabilities dropped, explicit ulimits."""

    def __init__(self, client_url: str, spec: SandboxSpec, *, ready_timeout: float = 15.0) -> None:
        if not client_url.startswith("unix://"):
            raise SandboxError("PodmanSandbox talks only to a private unix socket")
        self.spec = spec
        self.socket_path = client_url.removeprefix("unix://")
        self.client = podman.PodmanClient(base_url=client_url)
        self.ready_timeout = ready_timeout
        self.name = naming.container_name(spec.run_id, spec.name_suffix)
        self.container_id: str | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def create(self) -> None:
        s = self.spec
        try:
            ctr = self.client.containers.create(
                s.image,
                name=self.name,
                entrypoint=[
                    "/bin/sh",
                    "-c",
                    _BOOT_SCRIPT + (_IDLE if not s.command else 'exec "$0" "$@"'),
                ],
                command=list(s.command),
                network_mode="none",
                cap_drop=["ALL"],
                no_new_privileges=True,
                ulimits=[
                    {"Name": "nofile", "Soft": s.nofile, "Hard": s.nofile},
                    {"Name": "nproc", "Soft": s.nproc, "Hard": s.nproc},
                ],
                labels={**s.labels, RUN_LABEL: s.run_id},
                environment=dict(s.env),
                working_dir=s.workdir,
                stop_timeout=s.stop_timeout,
            )
        except APIError as e:
            raise SandboxError(f"create {self.name}: {e}") from e
        self.container_id = str(ctr.id)

    def _ctr(self) -> Container:
        if self.container_id is None:
            raise SandboxError("sandbox not created")
        try:
            return self.client.containers.get(self.container_id)
        except NotFound as e:
            raise SandboxError(f"container {self.name} is gone") from e

    def start(self) -> None:
        self._ctr().start()
        self._wait_token()

    def restart(self) -> None:
        self._ctr().restart(timeout=self.spec.stop_timeout)
        self._wait_token()

    def recreate(self) -> None:
        """New container (new id) from the same spec, under the same name."""
        self.remove()
        self.create()
        self.start()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            self._ctr().kill(signal=int(sig))
        except APIError as e:
            raise SandboxError(f"kill {self.name}: {e}") from e

    def remove(self) -> None:
        if self.container_id is None:
            return
        with contextlib.suppress(NotFound):
            self.client.containers.get(self.container_id).remove(force=True, v=True)
        self.container_id = None

    def is_running(self) -> bool:
        ctr = self._ctr()
        ctr.reload()
        return bool(ctr.attrs["State"]["Running"])

    # --- identity ------------------------------------------------------------------------------

    def _read_token(self) -> str | None:
        r = self.exec(["/bin/sh", "-c", _READ_TOKEN], timeout=10)
        lines = r.stdout.decode().split("\n")
        if r.exit_code != 0 or len(lines) < 2:
            return None
        st, _, tok = lines[1].partition(" ")
        return tok if st == lines[0] and tok else None

    def _wait_token(self) -> str:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            tok = self._read_token()
            if tok is not None:
                return tok
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: no boot token after {self.ready_timeout}s")
            time.sleep(0.02)

    def identity(self) -> SandboxIdentity:
        ctr = self._ctr()
        ctr.reload()
        state = ctr.attrs["State"]
        if not state.get("Running"):
            raise SandboxError(f"{self.name} is not running")
        token = self._wait_token()
        return SandboxIdentity(
            container_id=str(ctr.id),
            init_pid=int(state["Pid"]),
            started_at=str(state["StartedAt"]),
            boot_token=token,
        )

    # --- exec ----------------------------------------------------------------------------------

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> ExecResult:
        """Run argv in the sandbox; stdin is fed then closed. Raises ExecTimeout on timeout."""
        cid = self._ctr().id
        body = {
            "AttachStdin": stdin is not None,
            "AttachStdout": True,
            "AttachStderr": True,
            "Cmd": list(argv),
        }
        resp = self.client.api.post(f"/containers/{cid}/exec", data=json.dumps(body))
        if resp.status_code >= 400:
            raise SandboxError(f"exec create in {self.name}: {resp.status_code} {resp.text}")
        exec_id = resp.json()["Id"]
        out, timed_out = self._exec_stream(exec_id, stdin, timeout)
        stdout, stderr = bytes(out.get(1, b"")), bytes(out.get(2, b""))
        if timed_out:
            raise ExecTimeout(f"{argv!r} timed out after {timeout}s", stdout, stderr)
        return ExecResult(exit_code=self._exec_exit_code(exec_id), stdout=stdout, stderr=stderr)

    def _exec_stream(
        self, exec_id: str, stdin: bytes | None, timeout: float
    ) -> tuple[dict[int, bytearray], bool]:
        # podman-py's exec_run cannot feed stdin, so start the exec over a hijacked
        # (HTTP Upgrade) connection ourselves: write stdin, half-close, read frames.
        deadline = time.monotonic() + timeout
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sel = selectors.DefaultSelector()
        try:
            sock.settimeout(max(timeout, 1.0))
            sock.connect(self.socket_path)
            sock.sendall(
                f"POST {API_PREFIX}/exec/{exec_id}/start HTTP/1.1\r\nHost: podman\r\n"
                "Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            buf = bytearray()
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    raise SandboxError("exec start: connection closed before response")
                buf.extend(chunk)
            head, _, rest = bytes(buf).partition(b"\r\n\r\n")
            status = head.split(b"\r\n", 1)[0]
            if b" 101 " not in status and b" 200 " not in status:
                raise SandboxError(f"exec start: {status.decode(errors='replace')} {rest[:500]!r}")
            frames, out = bytearray(rest), dict[int, bytearray]()
            _demux(frames, out)
            pending = memoryview(stdin or b"")
            want_write = len(pending) > 0
            if stdin is not None and not want_write:
                sock.shutdown(socket.SHUT_WR)  # empty stdin: EOF right away
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0))
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._kill_exec(exec_id)
                    return out, True
                for _, ev in sel.select(left):
                    if ev & selectors.EVENT_WRITE:
                        n = sock.send(pending[:65536])
                        pending = pending[n:]
                        if not pending:
                            sock.shutdown(socket.SHUT_WR)
                            sel.modify(sock, selectors.EVENT_READ)
                    if ev & selectors.EVENT_READ:
                        chunk = sock.recv(65536)
                        if not chunk:
                            return out, False
                        frames.extend(chunk)
                        _demux(frames, out)
        finally:
            sel.close()
            sock.close()

    def _exec_inspect(self, exec_id: str) -> dict[str, object] | None:
        r = self.client.api.get(f"/exec/{exec_id}/json")
        return dict(r.json()) if r.status_code == 200 else None

    def _exec_exit_code(self, exec_id: str) -> int:
        # The stream can end a moment before podman records the exit; wait boundedly.
        deadline = time.monotonic() + 10
        while True:
            info = self._exec_inspect(exec_id)
            if info is None:
                raise SandboxError(f"exec session {exec_id} lost (sandbox restarted/removed?)")
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(str(info["ExitCode"]))
            if time.monotonic() > deadline:
                raise SandboxError(f"exec session {exec_id} has no exit code")
            time.sleep(0.01)

    def _kill_exec(self, exec_id: str) -> None:
        info = self._exec_inspect(exec_id)
        pid = int(str(info.get("Pid") or 0)) if info else 0
        if pid > 0:  # host pid of the exec'd process (we are root on the host)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # --- files ---------------------------------------------------------------------------------

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        directory, _, base = path.rpartition("/")
        if not base or not path.startswith("/"):
            raise SandboxError(f"put_file needs an absolute file path, got {path!r}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            ti = tarfile.TarInfo(base)
            ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
            tar.addfile(ti, io.BytesIO(data))
        if not self._ctr().put_archive(directory or "/", buf.getvalue()):
            raise SandboxError(f"put_file {path} failed")

    def get_file(self, path: str) -> bytes:
        try:
            stream, _ = self._ctr().get_archive(path)
        except APIError as e:
            raise SandboxError(f"get_file {path}: {e}") from e
        raw = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    f = tar.extractfile(member)
                    assert f is not None
                    return f.read()
        raise SandboxError(f"get_file {path}: not a regular file")

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]


# --- the backend's registration ---------------------------------------------------------------


class PodmanRunService(PodmanService):
    """The run's private Podman service; its factory makes sandboxes on the service's socket."""

    def __enter__(self) -> PodmanRunService:
        self.start()
        return self

    def sandbox(self, spec: SandboxSpec) -> PodmanSandbox:
        return PodmanSandbox(self.url, spec)


def sweep_containers(wants: Callable[[str], bool]) -> registry.SweepResult:
    """Remove containers whose name parses back to a run id `wants` (the podman CLI: a crashed
    run's service is gone)."""
    result = registry.SweepResult()
    r = subprocess.run(
        ["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True, timeout=60
    )
    if r.returncode != 0:
        result.errors.append(f"podman ps: {r.stderr.strip()}")
        return result
    for c in json.loads(r.stdout or "[]"):
        name = (c.get("Names") or [""])[0]
        parsed = naming.parse_as("container", name)
        if parsed is None or not wants(parsed.run_id):
            continue
        rm = subprocess.run(
            ["podman", "rm", "-f", "-t", "0", c["Id"]], capture_output=True, text=True, timeout=60
        )
        if rm.returncode == 0:
            result.removed.append(name)
        else:
            result.errors.append(f"podman rm {name}: {rm.stderr.strip()}")
    return result


class PodmanImages:
    """The host's Podman image store (the podman CLI)."""

    def image_id(self, ref: str) -> str | None:
        proc = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return None
        return "sha256:" + proc.stdout.strip().removeprefix("sha256:")

    def load_archive(self, archive: Path) -> None:
        _podman(["load", "-q", "-i", str(archive)])

    def import_rootfs(self, rootfs_tar: bytes, ref: str) -> None:
        # podman import reads from stdin with "-"; no temp file needed.
        _podman(["import", "--change", 'CMD=["/bin/sh"]', "-", ref], stdin=rootfs_tar)

    def remove(self, ref: str) -> None:
        subprocess.run(["podman", "rmi", ref], capture_output=True)


def _podman(args: list[str], stdin: bytes | None = None) -> None:
    proc = subprocess.run(["podman", *args], input=stdin, capture_output=True)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace")[-4000:]
        raise RuntimeError(f"podman {' '.join(args[:2])} failed ({proc.returncode}): {err}")


def host_problems() -> list[str]:
    """Podman on PATH and answering `podman info` ([] when usable)."""
    podman = shutil.which("podman")
    if podman is None:
        return ["podman not found on PATH"]
    try:
        r = subprocess.run(
            [podman, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"podman is not usable: {exc}"]
    if r.returncode != 0:
        return [
            f"podman is not usable: `podman info` exited {r.returncode}: {r.stderr.strip()[-300:]}"
        ]
    return []


BACKEND = registry.register(
    registry.Backend(
        name="podman",
        service=PodmanRunService,
        sweep=sweep_containers,
        images=PodmanImages,
        host_problems=host_problems,
        service_role=SERVICE_ROLE,
    )
)
