"""The sandbox interface every backend implements (`podman.PodmanSandbox` is the first).

Fault plugins, interposers and attempts use only this protocol; a backend registers itself in
`registry.py`, and the conformance suite (`conformance.py`, `bench selftest --sandbox NAME`) is
what it must pass.

Identity (for the sandbox_restart witness) = container id + init pid + start time + a boot
token the sandbox writes at every start, so a reader can tell this boot from a stale one.
"""

from __future__ import annotations

import signal
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class SandboxError(RuntimeError):
    pass


class ExecTimeout(SandboxError):
    """The exec'd command outlived its timeout and was SIGKILLed; partial output attached."""

    def __init__(self, msg: str, stdout: bytes, stderr: bytes) -> None:
        super().__init__(msg)
        self.stdout, self.stderr = stdout, stderr


class SandboxIdentity(BaseModel):
    model_config = ConfigDict(frozen=True)
    container_id: str
    init_pid: int
    started_at: str
    boot_token: str


class ExecResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    exit_code: int
    stdout: bytes
    stderr: bytes


class SandboxSpec(BaseModel):
    """Everything needed to (re)create the same sandbox."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    name_suffix: str
    image: str
    command: list[str] = Field(default_factory=list)  # empty = idle until stopped
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    nofile: int = 4096  # explicit: the runner lacks CAP_SYS_RESOURCE to exceed its hard limit
    nproc: int = 4096
    stop_timeout: int = 5


@runtime_checkable
class Sandbox(Protocol):
    """What injectors and interposers may do to a sandbox, whatever the backend."""

    spec: SandboxSpec

    @property
    def name(self) -> str:
        """The backend's name of the sandbox (carries the run id, so `sweep` finds it)."""
        ...

    def create(self) -> None: ...
    def start(self) -> None: ...
    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> ExecResult: ...
    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...
    def get_file(self, path: str) -> bytes: ...
    def restart(self) -> None: ...
    def recreate(self) -> None: ...
    def kill(self, sig: int = signal.SIGKILL) -> None: ...
    def remove(self) -> None: ...
    def identity(self) -> SandboxIdentity: ...
    def is_running(self) -> bool: ...
    def close(self) -> None:
        """Release the client connection (the sandbox itself stays as it is)."""
        ...
