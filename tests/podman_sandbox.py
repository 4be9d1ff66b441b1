"""One running busybox sandbox of the Podman backend (through the sandbox registry), for tests
about what sits in front of a sandbox (the tool interposer over HTTP, and over MCP): shared so
both stand on the same one."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.runtime.host import naming
from runner.runtime.sandbox import registry, testimage
from runner.runtime.sandbox.base import Sandbox, SandboxSpec


def podman_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    return None


@contextlib.contextmanager
def running_test_sandbox(suffix: str) -> Iterator[Sandbox]:
    """Started, under a held run id of its own; removed with its service afterwards."""
    if reason := podman_missing():
        pytest.skip(reason)
    backend = registry.backend("podman")
    rid = naming.new_run_id()
    d = Path(tempfile.mkdtemp(prefix=f"afb-{suffix}-"))
    with naming.hold_run(rid), backend.service(rid, d) as svc:
        ref, _ = testimage.ensure_test_image(backend.images())
        sb = svc.sandbox(SandboxSpec(run_id=rid, name_suffix=suffix, image=ref))
        sb.create()
        try:
            sb.start()
            yield sb
        finally:
            sb.remove()
            sb.close()
    shutil.rmtree(d, ignore_errors=True)
