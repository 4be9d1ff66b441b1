from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from runner.runtime.host import naming
from runner.runtime.host.podman_service import SERVICE_ROLE, PodmanService, check_setup, ping

pytestmark = pytest.mark.runtime


def test_setup_check_passes_on_configured_machine() -> None:
    facts = check_setup()
    assert facts["oci_runtime"] == "runc"
    assert set(facts["default_ulimits"]) >= {"nofile", "nproc"}  # type: ignore[arg-type]


def test_service_lifecycle(run_id: str, tmp_run_dir: Path) -> None:
    with PodmanService(run_id, tmp_run_dir) as svc:
        assert ping(svc.socket_path)
        assert svc.url == f"unix://{tmp_run_dir}/podman/podman.sock"
        pid = svc.pid
        assert pid is not None
        env = psutil.Process(pid).environ()
        assert env[naming.ENV_RUN] == run_id and env[naming.ENV_ROLE] == SERVICE_ROLE
        assert oct(os.stat(svc.sock_dir).st_mode & 0o777) == "0o700"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not svc.socket_path.exists()
    assert not ping(svc.socket_path)


def test_podman_py_against_service(podman_service: PodmanService, test_image: str) -> None:
    import podman

    with podman.PodmanClient(base_url=podman_service.url) as client:
        assert client.ping()
        version = client.version()
        assert version["Version"].split(".")[0] in ("4", "5")
        assert any(test_image in (img.tags or []) for img in client.images.list())
