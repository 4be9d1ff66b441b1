"""Sandbox backends by name: the one place that knows which backends exist.

A backend is one module of this package that calls `register(Backend(...))` at import; every
module here is imported on first use (as fault kinds are), so a new backend is one new module and
nothing else is edited. `conformance.py` is what a backend must pass (`bench selftest --sandbox
NAME`, and tests/runtime/test_sandbox_conformance.py for every registered name).

A backend provides:
- `service(run_id, state_dir)`: the per-run service it needs (a daemon, a socket), a context
  manager started and stopped with the run; its `sandbox(spec)` is the factory of the run's
  sandboxes (a sandbox needs its running service, so the factory lives on it);
- `sweep(wants)`: remove what crashed runs left, recognised by per-run names only
  (`naming.parse_as`), for the run ids `wants` accepts; called by `bench sweep` for every backend;
- `images()`: its `ImageStore` (imagebuild loads built archives into it, the self-test imports
  its busybox rootfs into it);
- `host_problems()`: what keeps this host from running it (checked by `bench worker`);
- `service_role`: the AFB_ROLE marker its service processes carry (sweep stops them gently).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

from runner.runtime.sandbox.base import Sandbox, SandboxSpec

DEFAULT = "podman"
_NOT_BACKENDS = {"base", "registry", "conformance", "testimage"}


class UnknownBackend(ValueError):
    """A backend name nothing registered; the message lists the registered ones."""


class SandboxService(Protocol):
    """A backend's per-run service; `sandbox` is the factory of the run's sandboxes."""

    def __enter__(self) -> SandboxService: ...
    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A sandbox for `spec`, not yet created (the caller creates, starts and removes it)."""
        ...


class ImageStore(Protocol):
    """Where a backend keeps images: what imagebuild and the test image need of it."""

    def image_id(self, ref: str) -> str | None:
        """`sha256:<hex>` of a present image (the config digest), None when absent."""
        ...

    def load_archive(self, archive: Path) -> None:
        """Load a docker-archive (it carries its tag)."""
        ...

    def import_rootfs(self, rootfs_tar: bytes, ref: str) -> None:
        """Make a one-layer image `ref` from a rootfs tar (default command /bin/sh)."""
        ...

    def remove(self, ref: str) -> None:
        """Best effort: the image may be in use."""
        ...


@dataclass(frozen=True)
class SweepResult:
    removed: list[str] = field(default_factory=list)  # names of what was removed
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Backend:
    name: str
    service: Callable[[str, Path], SandboxService]
    sweep: Callable[[Callable[[str], bool]], SweepResult]
    images: Callable[[], ImageStore]
    host_problems: Callable[[], list[str]]
    service_role: str | None = None


_BACKENDS: dict[str, Backend] = {}
_discovered = False


def register(entry: Backend) -> Backend:
    old = _BACKENDS.get(entry.name)
    if old is not None and old is not entry:
        raise ValueError(f"a sandbox backend named {entry.name!r} is already registered")
    _BACKENDS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a backend (for tests that register a throw-away one)."""
    _BACKENDS.pop(name, None)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import runner.runtime.sandbox as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in _NOT_BACKENDS:
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    _discovered = True


def registered() -> tuple[str, ...]:
    """Names of the registered backends, sorted."""
    _discover()
    return tuple(sorted(_BACKENDS))


def backend(name: str = DEFAULT) -> Backend:
    _discover()
    try:
        return _BACKENDS[name]
    except KeyError:
        raise UnknownBackend(
            f"no sandbox backend named {name!r}; registered: {', '.join(registered())}"
        ) from None


def require(name: str) -> str:
    """`name` if a backend is registered under it, else the input error `--sandbox` reports
    (exit 2, listing the registered ones): one check for run, worker and tasks check."""
    from runner.evaluator.core.errors import InputError

    if name not in registered():
        raise InputError(
            f"--sandbox {name!r}: no such sandbox backend; registered: " + ", ".join(registered())
        )
    return name


def service_roles() -> frozenset[str]:
    """The process roles of every backend's service (sweep SIGTERMs them before killing)."""
    return frozenset(b.service_role for b in map(backend, registered()) if b.service_role)
