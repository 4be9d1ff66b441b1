"""Runner-managed `podman system service` on a private unix socket, plus a setup check.

Each run gets its own service process (socket under the run dir) so sandboxes never depend on
a system-wide socket and a crashed run leaves something `sweep` can recognise: the service
process carries AFB_RUN=<run id> / AFB_ROLE=podman-service in its environment.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
import tomllib
from pathlib import Path
from types import TracebackType

from runner.runtime.host import naming, paths

SERVICE_ROLE = "podman-service"
_REQUIRED_ULIMITS = ("nofile", "nproc")


class SetupError(RuntimeError):
    """The machine is not configured the way the runtime needs."""


class ServiceError(RuntimeError):
    pass


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def ping(socket_path: Path, timeout: float = 2.0) -> bool:
    """True when the service answers `GET /_ping` with OK."""
    conn = _UnixHTTPConnection(str(socket_path), timeout)
    try:
        conn.request("GET", "/_ping")
        resp = conn.getresponse()
        return resp.status == 200 and resp.read().strip() == b"OK"
    except OSError:
        return False
    finally:
        conn.close()


class PodmanService:
    """Context manager: start the service, wait until it answers, stop it on exit."""

    def __init__(self, run_id: str, run_dir: Path, *, start_timeout: float = 30.0) -> None:
        self.run_id = naming.check_run_id(run_id)
        self.sock_dir = Path(run_dir) / "podman"
        self.socket_path = self.sock_dir / "podman.sock"
        if len(str(self.socket_path)) > 100:  # sun_path is 108 bytes
            raise ServiceError(f"socket path too long for AF_UNIX: {self.socket_path}")
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """podman-py base_url for this service."""
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> PodmanService:
        self.sock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        env = dict(os.environ)
        env[naming.ENV_RUN] = self.run_id
        env[naming.ENV_ROLE] = SERVICE_ROLE
        log = open(self.sock_dir / "service.log", "wb")  # noqa: SIM115 - handed to the child
        try:
            self._proc = subprocess.Popen(
                ["podman", "system", "service", "--time=0", f"unix://{self.socket_path}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # our terminal's ^C must not kill it mid-teardown
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = (self.sock_dir / "service.log").read_text(errors="replace")[-2000:]
                raise ServiceError(f"podman service exited with {self._proc.returncode}: {tail}")
            if self.socket_path.exists() and ping(self.socket_path):
                return self
            time.sleep(0.05)
        self.stop()
        raise ServiceError(f"podman service did not answer within {self.start_timeout}s")

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def __enter__(self) -> PodmanService:
        return self.start()

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --- setup check ------------------------------------------------------------------------------


def _merged_containers_conf() -> dict[str, dict[str, object]]:
    """Merge containers.conf the way podman does: base files, then .d drop-ins in name order."""
    merged: dict[str, dict[str, object]] = {}
    files = [p for p in paths.CONTAINERS_CONF_FILES if p.is_file()]
    if paths.CONTAINERS_CONF_DIR.is_dir():
        files += sorted(p for p in paths.CONTAINERS_CONF_DIR.iterdir() if p.suffix == ".conf")
    for f in files:
        with f.open("rb") as fh:
            data = tomllib.load(fh)
        for section, values in data.items():
            if isinstance(values, dict):
                merged.setdefault(section, {}).update(values)
    return merged


def _parse_ulimits(items: object) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for item in items if isinstance(items, list) else []:
        name, _, limits = str(item).partition("=")
        soft, _, hard = limits.partition(":")
        with contextlib.suppress(ValueError):
            out[name.strip()] = (int(soft), int(hard or soft))
    return out


def check_setup() -> dict[str, object]:
    """Verify podman uses runc and has explicit ulimits within our hard limits.

    Returns the facts it checked; raises SetupError naming the fix otherwise.
    """
    fix = "run scripts/setup-runtime.sh as root"
    problems: list[str] = []
    for tool in ("podman", "runc", "nft", "ip"):
        if shutil.which(tool) is None:
            problems.append(f"`{tool}` not found on PATH")
    if problems:
        raise SetupError("; ".join(problems) + f" ({fix})")

    info = json.loads(
        subprocess.run(
            ["podman", "info", "--format", "json"], check=True, capture_output=True, text=True
        ).stdout
    )
    runtime = info["host"]["ociRuntime"]["name"]
    if runtime != "runc":
        problems.append(f"podman OCI runtime is {runtime!r}, need 'runc' (crun fails here)")

    conf = _merged_containers_conf()
    ulimits = _parse_ulimits(conf.get("containers", {}).get("default_ulimits"))
    rl = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}
    for name in _REQUIRED_ULIMITS:
        if name not in ulimits:
            problems.append(f"containers.conf lacks default_ulimits for {name}")
            continue
        hard_here = resource.getrlimit(rl[name])[1]
        soft, hard = ulimits[name]
        if hard_here != resource.RLIM_INFINITY and (hard > hard_here or soft > hard):
            problems.append(
                f"default_ulimits {name}={soft}:{hard} exceeds this process's hard limit "
                f"{hard_here} (no CAP_SYS_RESOURCE to raise it)"
            )
    if problems:
        raise SetupError("; ".join(problems) + f" ({fix})")
    return {
        "podman_version": info["version"]["Version"],
        "oci_runtime": runtime,
        "cgroup_manager": info["host"].get("cgroupManager"),
        "default_ulimits": ulimits,
    }
