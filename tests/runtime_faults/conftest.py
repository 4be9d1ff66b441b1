"""Fixtures for fault tests on the real runtime (root, Podman, netns, nftables)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.runtime.attempt.services import RunServices
from runner.runtime.host import naming
from runner.runtime.sandbox import testimage


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "fault tests need root"
    for tool in ("podman", "runc", "nft", "ip", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    if not Path("/usr/bin/python3").exists():
        return "the unprivileged subject needs /usr/bin/python3"
    return None


@pytest.fixture(scope="session", autouse=True)
def _require_runtime() -> None:
    if reason := _missing():
        pytest.skip(reason)


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    ref, built = testimage.ensure_test_image()
    yield ref
    if built:
        testimage.remove_image(ref)


@pytest.fixture(scope="module")
def services() -> Iterator[RunServices]:
    d = Path(tempfile.mkdtemp(prefix="afb-ft-"))
    with RunServices(naming.new_run_id(), d) as s:
        yield s
    shutil.rmtree(d, ignore_errors=True)
