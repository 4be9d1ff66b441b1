"""The deterministic image: one normalised tar layer and a docker archive whose config digest
(the image id) depends on nothing but the layer's bytes, the epoch and the input digest."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from .sources import SourceSpec, _safe_member_path

# Bumped whenever the normalisation below changes what bytes a given input produces.
BUILDER_VERSION = "afb-images/1"
# An image.toml names its builder (default mmdebstrap, built here). "nix-dockerTools" images are
# built by the flake (flake.nix, nix/image-inputs.nix), which computes their input digest the
# same way with this version string; tests/reproducibility/test_nix.py checks the two agree.
BUILDERS = {"mmdebstrap": BUILDER_VERSION, "nix-dockerTools": "afb-images-nix/1"}
SRC_PREFIX = "opt/swe-lite/src"
ENTRYPOINT_PATH = "usr/local/bin/afb-init"
BOOT_TOKEN_PATH = "/run/afb-boot-token"
LABEL_INPUT_DIGEST = "org.agent-fault-bench.input-digest"
IMAGE_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
)

# --------------------------------------------------------------------------------------------
# Deterministic layer and archive


def _norm(ti: tarfile.TarInfo, name: str, epoch: int) -> tarfile.TarInfo:
    out = tarfile.TarInfo(name)
    out.type = ti.type
    out.mode = ti.mode & 0o7777
    out.uid, out.gid = ti.uid, ti.gid
    out.uname = out.gname = ""
    out.mtime = min(int(ti.mtime), epoch)
    out.size = ti.size if ti.isreg() else 0
    out.linkname = ti.linkname
    out.devmajor, out.devminor = ti.devmajor, ti.devminor
    return out


def _dir_info(name: str, epoch: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mode = 0o755
    ti.mtime = epoch
    return ti


def _skip_rootfs(name: str) -> bool:
    # /dev nodes are provided by the runtime; bytecode is regenerated on demand.
    return (
        name.startswith("dev/")
        or name.endswith(".pyc")
        or "/__pycache__" in f"/{name}"
        or name.startswith(("proc/", "sys/"))
    )


def write_layer(
    rootfs_tar: Path,
    out: BinaryIO,
    epoch: int,
    sdists: Sequence[tuple[SourceSpec, Path]] = (),
    entrypoint: bytes | None = None,
) -> None:
    """Write one normalised layer tar from mmdebstrap's tar output plus the baked-in files."""
    with contextlib.ExitStack() as stack:
        _write_layer(stack, rootfs_tar, out, epoch, sdists, entrypoint)


def _write_layer(
    stack: contextlib.ExitStack,
    rootfs_tar: Path,
    out: BinaryIO,
    epoch: int,
    sdists: Sequence[tuple[SourceSpec, Path]],
    entrypoint: bytes | None,
) -> None:
    # (name -> (TarInfo, data opener)); hard links are re-pointed after sorting.
    entries: dict[str, tuple[tarfile.TarInfo, Any]] = {}
    src = stack.enter_context(tarfile.open(rootfs_tar, "r:"))  # noqa: SIM115
    members = {}
    for m in src.getmembers():
        name = _safe_member_path(m.name)
        if name is None or _skip_rootfs(name):
            continue
        members[name] = m
    for name, m in members.items():
        if m.islnk():
            target = _safe_member_path(m.linkname)
            if target is None or target not in members:
                raise ValueError(f"hard link {name} -> {m.linkname} has no target")
            entries[name] = (_norm(members[target], name, epoch), ("link", target))
        elif m.isreg():
            entries[name] = (_norm(m, name, epoch), ("rootfs", m))
        elif m.isdir() or m.issym() or m.ischr() or m.isblk() or m.isfifo():
            entries[name] = (_norm(m, name, epoch), None)

    def add_dirs(path: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in entries:
                entries[d] = (_dir_info(d, epoch), None)

    if entrypoint is not None:
        ti = tarfile.TarInfo(ENTRYPOINT_PATH)
        ti.mode, ti.mtime, ti.size = 0o755, epoch, len(entrypoint)
        entries[ENTRYPOINT_PATH] = (ti, ("bytes", entrypoint))
        add_dirs(ENTRYPOINT_PATH)
    for spec, path in sdists:
        star = stack.enter_context(tarfile.open(path, "r:*"))  # noqa: SIM115
        for m in star.getmembers():
            rel = _safe_member_path(m.name)
            if rel is None or not (rel == spec.root or rel.startswith(spec.root + "/")):
                continue
            name = f"{SRC_PREFIX}/{rel}"
            if m.isdir():
                entries[name] = (_dir_info(name, epoch), None)
            elif m.isreg():
                ti = tarfile.TarInfo(name)
                ti.mode = 0o755 if m.mode & 0o111 else 0o644
                ti.mtime, ti.size = min(int(m.mtime), epoch), m.size
                entries[name] = (ti, ("sdist", star, m))
            else:
                continue  # sdists carry no links or devices we need
            add_dirs(name)

    # The first name of each hard-link group (in sorted order) carries the data.
    carrier: dict[str, str] = {}
    for name in sorted(entries):
        ti, how = entries[name]
        if how and how[0] in ("link", "rootfs"):
            key = how[1] if how[0] == "link" else name
            carrier.setdefault(key, name)

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(entries):
            ti, how = entries[name]
            data: BinaryIO | None = None
            if how is not None:
                kind = how[0]
                if kind in ("link", "rootfs"):
                    key = how[1] if kind == "link" else name
                    first = carrier[key]
                    if first != name:
                        ti.type, ti.linkname, ti.size = tarfile.LNKTYPE, first, 0
                    else:
                        ti.type = tarfile.REGTYPE
                        ti.size = members[key].size
                        data = src.extractfile(members[key])
                elif kind == "bytes":
                    data = io.BytesIO(how[1])
                elif kind == "sdist":
                    data = how[1].extractfile(how[2])
            tar.addfile(ti, data)


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def image_config(layer_digest: str, epoch: int, arch: str, input_digest: str) -> dict[str, Any]:
    created = _iso(epoch)
    return {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": {
            "Entrypoint": ["/" + ENTRYPOINT_PATH],
            "Env": list(IMAGE_ENV),
            "WorkingDir": "/",
            "Labels": {LABEL_INPUT_DIGEST: input_digest},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": created, "created_by": BUILDER_VERSION}],
    }


def write_docker_archive(
    layer: Path, out: Path, config: dict[str, Any], tag: str, epoch: int
) -> str:
    """Write a docker-archive with fixed metadata; return the config digest (the image id)."""
    config_bytes = _json_bytes(config)
    config_hex = hashlib.sha256(config_bytes).hexdigest()
    layer_hex = config["rootfs"]["diff_ids"][0].removeprefix("sha256:")
    manifest = _json_bytes(
        [{"Config": f"{config_hex}.json", "RepoTags": [tag], "Layers": [f"{layer_hex}/layer.tar"]}]
    )

    def info(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.type, ti.size, ti.mtime = kind, size, epoch
        ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
        return ti

    with open(out, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as t:
        t.addfile(info(f"{config_hex}.json", len(config_bytes)), io.BytesIO(config_bytes))
        t.addfile(info(layer_hex, 0, tarfile.DIRTYPE))
        with open(layer, "rb") as lf:
            t.addfile(info(f"{layer_hex}/layer.tar", layer.stat().st_size), lf)
        t.addfile(info("manifest.json", len(manifest)), io.BytesIO(manifest))
    return "sha256:" + config_hex
