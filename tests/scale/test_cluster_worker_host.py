"""`bench worker` checks its host before it accepts work, and refuses with exit 2 and a reason.

Real checks: the sandbox image is looked up in the real Podman by the tag of its input digest
(an image folder whose declared inputs differ has another tag, absent here); a worker started
as an unprivileged user is refused for not being root; a bad scheduler address names the option.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.imagebuild import builder as images
from runner.runtime.prepared import SpecSource
from runner.scale import worker_host

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"
BENCH = str(Path(sys.executable).parent / "bench")


@pytest.fixture(autouse=True)
def _real_host() -> None:
    if os.geteuid() != 0 or shutil.which("podman") is None:
        pytest.skip("worker host checks need root and Podman")


def test_a_host_holding_the_image_is_ready() -> None:
    assert images.built_image(ROOT / "images" / "swe-lite") is not None, "build swe-lite first"
    assert worker_host.host_problems([SpecSource.read(SMOKE)]) == []


def test_an_image_of_other_inputs_is_refused_by_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same image folder with one declared input changed: another digest, another tag."""
    shutil.copytree(ROOT / "images" / "swe-lite", tmp_path / "images" / "swe-lite")
    shutil.copytree(ROOT / "specs" / "swe-lite", tmp_path / "specs" / "swe-lite")
    conf = tmp_path / "images" / "swe-lite" / "image.toml"
    conf.write_text(conf.read_text().replace('"patch"]', '"patch", "less"]'))
    monkeypatch.setattr(worker_host, "project_root", lambda: tmp_path)
    (problem,) = worker_host.host_problems([SpecSource.read(SMOKE)])
    digest = images.image_input_digest(tmp_path / "images" / "swe-lite")
    assert digest != images.image_input_digest(ROOT / "images" / "swe-lite")
    assert digest in problem and images.image_tag(tmp_path / "images" / "swe-lite") in problem
    assert "not loaded" in problem and str(SMOKE) in problem


def test_bench_worker_refuses_an_unprivileged_user(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    r = subprocess.run(
        [
            "setpriv",
            f"--reuid={nobody.pw_uid}",
            f"--regid={nobody.pw_gid}",
            "--clear-groups",
            BENCH,
            "worker",
            "--scheduler",
            "tcp://127.0.0.1:1",
            "--spec",
            str(SMOKE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "refused: not root" in r.stderr and "no worker started" in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_worker_names_a_bad_scheduler_address() -> None:
    r = subprocess.run(
        [BENCH, "worker", "--scheduler", "127.0.0.1:8786", "--spec", str(SMOKE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "--scheduler" in r.stderr and "tcp://HOST:PORT" in r.stderr


def test_the_sandbox_backend_asked_is_the_one_checked() -> None:
    """A backend that cannot run here is named, and no image is looked up in its store."""
    from runner.runtime.sandbox import podman, registry

    def no_store() -> registry.ImageStore:
        raise AssertionError("an unusable backend's image store was asked")

    registry.register(
        registry.Backend("unusable", podman.PodmanRunService, podman.sweep_containers,
                         no_store, lambda: ["unusable: its daemon is not installed"])
    )  # fmt: skip
    try:
        problems = worker_host.host_problems([SMOKE], "unusable")
    finally:
        registry.unregister("unusable")
    assert problems == ["unusable: its daemon is not installed"]
    with pytest.raises(registry.UnknownBackend, match=r"registered: .*podman"):
        worker_host.host_problems([SMOKE], "unusable")
