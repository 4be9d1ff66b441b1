"""Tiny busybox image for runtime tests, built locally (there is no registry access).

The rootfs is Debian's busybox-static binary plus one symlink per applet, written as a
deterministic tar (sorted entries, mtime 0, uid/gid 0) and imported into a backend's image
store (`registry.ImageStore.import_rootfs`; default: the default backend's). The tag is the tar's
sha256, so the same busybox binary always yields the same tag and a rebuild is skipped when the
image is already present.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.runtime.sandbox.registry import ImageStore

BUSYBOX = Path("/bin/busybox")
IMAGE_REPO = "localhost/afb-testimage"
_DIRS = ("bin", "dev", "etc", "proc", "root", "run", "sys", "tmp", "var", "var/tmp")


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.mtime = kind, mode, 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def applets(busybox: Path = BUSYBOX) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True)
    return sorted({a for a in out.stdout.split() if a and "/" not in a and a != "busybox"})


def build_rootfs_tar(busybox: Path = BUSYBOX) -> bytes:
    """Deterministic rootfs tar bytes."""
    binary = busybox.read_bytes()
    entries: list[tuple[str, tarfile.TarInfo, bytes | None]] = []
    for d in _DIRS:
        mode = 0o1777 if d in ("tmp", "var/tmp") else 0o755
        entries.append((d, _info(d, tarfile.DIRTYPE, mode), None))
    bb = _info("bin/busybox", tarfile.REGTYPE, 0o755)
    bb.size = len(binary)
    entries.append(("bin/busybox", bb, binary))
    for a in applets(busybox):
        link = _info(f"bin/{a}", tarfile.SYMTYPE, 0o777)
        link.linkname = "busybox"
        entries.append((f"bin/{a}", link, None))
    passwd = b"root:x:0:0:root:/root:/bin/sh\n"
    pw = _info("etc/passwd", tarfile.REGTYPE, 0o644)
    pw.size = len(passwd)
    entries.append(("etc/passwd", pw, passwd))
    group = b"root:x:0:\n"
    gr = _info("etc/group", tarfile.REGTYPE, 0o644)
    gr.size = len(group)
    entries.append(("etc/group", gr, group))

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for _, ti, data in sorted(entries, key=lambda e: e[0]):
            tar.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _store(store: ImageStore | None) -> ImageStore:
    from runner.runtime.sandbox import registry

    return store if store is not None else registry.backend().images()


def ensure_test_image(store: ImageStore | None = None) -> tuple[str, bool]:
    """Build (if absent) and return (image ref, built_now)."""
    images = _store(store)
    data = build_rootfs_tar()
    ref = f"{IMAGE_REPO}:{hashlib.sha256(data).hexdigest()[:16]}"
    if images.image_id(ref) is not None:
        return ref, False
    images.import_rootfs(data, ref)
    return ref, True


def remove_image(ref: str, store: ImageStore | None = None) -> None:
    """Best effort: the image may be in use by another suite's containers."""
    _store(store).remove(ref)
