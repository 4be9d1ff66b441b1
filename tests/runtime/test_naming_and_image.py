from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from runner.runtime.host import naming
from runner.runtime.sandbox import testimage


def test_run_id_shape() -> None:
    ids = {naming.new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 6 and naming.check_run_id(i) == i for i in ids)
    for bad in ("ABCDEF", "12345", "1234567", "zzzzzz", "afb-00"):
        with pytest.raises(naming.NamingError):
            naming.check_run_id(bad)


def test_names_round_trip_and_fit() -> None:
    rid = "0a1b2c"
    assert naming.container_name(rid, "tools") == "afb-0a1b2c-tools"
    assert naming.netns_name(rid, 3) == "afb-0a1b2c-3"
    assert naming.nft_table_name(rid, 3) == "afb_0a1b2c_3"
    h, a = naming.veth_names(rid, naming.MAX_INDEX)
    assert len(h) <= 15 and len(a) <= 15
    assert naming.parse_as("veth", h) == naming.ParsedName("veth", rid, 99999, side="h")
    assert naming.parse_as("netns", "afb-0a1b2c-3") == naming.ParsedName("netns", rid, 3)
    assert naming.parse_as("nft", "afb_0a1b2c_3") == naming.ParsedName("nft", rid, 3)
    c = naming.parse_as("container", "afb-0a1b2c-tools")
    assert c is not None and c.run_id == rid and c.suffix == "tools"
    with pytest.raises(naming.NamingError):
        naming.netns_name(rid, naming.MAX_INDEX + 1)
    with pytest.raises(naming.NamingError):
        naming.container_name(rid, "bad name")


@pytest.mark.parametrize(
    "name",
    [
        "eth0",
        "lo",
        "afb",
        "afb-",
        "afb-zzzzzz-1",
        "afb-0A1B2C-1",
        "afb-0a1b2c",
        "xafb-0a1b2c-1",
        "afb_0a1b2c",
        "afb0a1b2cx1",
        "afb0a1b2ch",
        "afb-0a1b2c-1-x ",
        "decoy-0a1b2c-1",
        "afb_0a1b2c_1_2",
        "podman0",
        "cni-podman0",
        "afb-0a1b2c1-1",
    ],
)
def test_foreign_names_not_recognised(name: str) -> None:
    for kind in ("netns", "veth", "nft"):
        assert naming.parse_as(kind, name) is None
    assert naming.parse_as("container", name) is None


def test_filter() -> None:
    assert naming.matches_filter("0a1b2c", None)
    assert naming.matches_filter("0a1b2c", "0a1")
    assert not naming.matches_filter("0a1b2c", "0a2")


@pytest.mark.runtime
def test_run_lock() -> None:
    rid = naming.new_run_id()
    assert not naming.run_is_live(rid)
    with naming.hold_run(rid):
        assert naming.run_is_live(rid)
        with pytest.raises(BlockingIOError), naming.hold_run(rid):
            pass
    assert not naming.run_is_live(rid)


@pytest.mark.runtime
def test_rootfs_tar_is_deterministic() -> None:
    a, b = testimage.build_rootfs_tar(), testimage.build_rootfs_tar()
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    with tarfile.open(fileobj=io.BytesIO(a)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in members)
    assert "bin/busybox" in names and "bin/sh" in names


@pytest.mark.runtime
def test_test_image_runs(test_image: str) -> None:
    import subprocess

    r = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--network",
            "none",
            "--cap-drop",
            "all",
            test_image,
            "sh",
            "-c",
            "echo ok",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
