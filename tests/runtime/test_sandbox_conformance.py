"""Every registered sandbox backend passes the package's conformance suite
(runner/runtime/sandbox/conformance.py), and a broken backend fails it by the check's name.

A new backend is one module under runner/runtime/sandbox/ that registers itself: it is picked up
here (and by `bench selftest --sandbox NAME`) without editing this file.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.runtime.host import naming, podman_service
from runner.runtime.sandbox import conformance, podman, registry
from runner.runtime.sandbox.base import ExecResult, Sandbox, SandboxSpec

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module", params=registry.registered())
def harness(request: pytest.FixtureRequest) -> Iterator[conformance.Harness]:
    with conformance.harness(registry.backend(request.param)) as h:
        yield h


@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_names())
def test_backend_passes(harness: conformance.Harness, check: conformance.Check) -> None:
    result = conformance.run_check(harness, check)
    assert result.ok, f"{harness.backend.name}: {check.name}: {result.error}"


def test_podman_names_and_labels(harness: conformance.Harness) -> None:
    """Podman-specific: the container's name carries the run id, its labels the spec's."""
    if harness.backend.name != "podman":
        pytest.skip("podman only")
    try:
        sb = harness.make(labels={"afb.role": "tools"})
        cid = sb.identity().container_id
        info = json.loads(
            subprocess.run(
                ["podman", "inspect", cid], check=True, capture_output=True, text=True
            ).stdout
        )[0]
        parsed = naming.parse_as("container", info["Name"])
        assert parsed is not None and parsed.run_id == harness.run_id
        assert info["Config"]["Labels"]["afb.run"] == harness.run_id
        assert info["Config"]["Labels"]["afb.role"] == "tools"
    finally:
        assert harness.cleanup() == []


# --- registry -------------------------------------------------------------------------------


def test_podman_is_registered_and_the_default() -> None:
    assert "podman" in registry.registered()
    assert registry.backend().name == registry.DEFAULT == "podman"
    assert podman_service.SERVICE_ROLE in registry.service_roles()


def test_an_unknown_backend_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(registry.UnknownBackend, match=r"registered: .*podman"):
        registry.backend("no-such-backend")


def test_a_second_backend_under_a_taken_name_is_refused() -> None:
    twin = registry.Backend("podman", podman.PodmanRunService, podman.sweep_containers,
                            podman.PodmanImages, podman.host_problems)  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        registry.register(twin)
    assert registry.backend("podman") is podman.BACKEND


# --- a broken backend fails the suite, by the check's name ------------------------------------


class _Broken:
    """A real Podman sandbox with one method broken (teardown sweeps what it leaves)."""

    def __init__(self, inner: podman.PodmanSandbox, breaks: str, made: list[Sandbox]) -> None:
        self._inner, self._breaks = inner, breaks
        made.append(inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def exec(self, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0) -> Any:
        if self._breaks == "exec":  # ignores its command: runs `true` whatever it is asked
            return ExecResult(exit_code=0, stdout=b"", stderr=b"")
        return self._inner.exec(argv, stdin=stdin, timeout=timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self._breaks != "kill":  # a no-op stop: the sandbox runs on
            self._inner.kill(sig)

    def remove(self) -> None:
        if self._breaks != "remove":
            self._inner.remove()


class _BrokenService:
    def __init__(self, run_id: str, state: Path, breaks: str, made: list[Sandbox]) -> None:
        self._inner = podman.PodmanRunService(run_id, state)
        self._breaks, self._made = breaks, made

    def __enter__(self) -> _BrokenService:
        self._inner.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._inner.__exit__(et, ev, tb)

    def sandbox(self, spec: SandboxSpec) -> Sandbox:
        return _Broken(self._inner.sandbox(spec), self._breaks, self._made)


@pytest.fixture
def broken() -> Iterator[Callable[[str], registry.Backend]]:
    made: list[Sandbox] = []
    names: list[str] = []

    def register(breaks: str) -> registry.Backend:
        name = f"broken-{breaks}"
        names.append(name)
        return registry.register(
            registry.Backend(
                name=name,
                service=lambda rid, d: _BrokenService(rid, d, breaks, made),
                sweep=podman.sweep_containers,
                images=podman.PodmanImages,
                host_problems=list,
            )
        )

    yield register
    for name in names:
        registry.unregister(name)
    # the service is gone with the suite: what a broken remove left goes the sweep's way
    run_ids = {sb.spec.run_id for sb in made}
    assert podman.sweep_containers(run_ids.__contains__).errors == []


@pytest.mark.parametrize(
    ("breaks", "checks", "fails"),
    [
        ("exec", ["create_start_identity", "exec_exit_codes_and_streams"],
         ["exec_exit_codes_and_streams"]),
        ("remove", ["put_and_get_file", "remove"], ["remove"]),
        ("kill", ["kill"], ["kill"]),
    ],
)  # fmt: skip
def test_a_broken_backend_fails_the_suite_by_name(
    broken: Callable[[str], registry.Backend], breaks: str, checks: list[str], fails: list[str]
) -> None:
    results = conformance.run_suite(broken(breaks), only=checks)
    assert [r.name for r in results] == checks
    assert [r.name for r in results if not r.ok] == fails
    assert all(r.error for r in results if not r.ok)


def test_bench_selftest_names_the_failed_check(broken: Callable[[str], registry.Backend]) -> None:
    broken("exec")
    r = CliRunner().invoke(
        app,
        ["selftest", "--sandbox", "broken-exec", "--check", "exec_exit_codes_and_streams",
         "--check", "exec_stdin"],
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "failed 2 check(s)" in r.output
    assert "exec_exit_codes_and_streams:" in r.output and "exec_stdin:" in r.output
