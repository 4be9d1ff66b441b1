"""NAR (Nix ARchive) serialisation, so our digests of file trees equal `nix hash path`.

Format (Eelco Dolstra's thesis, §5.2.1): every string is a little-endian u64 length, the bytes,
and zero padding to a multiple of 8; directory entries are sorted by name bytes. Only regular
files (with the executable bit), symlinks and directories exist in a NAR.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import InputError


def _str(data: bytes) -> bytes:
    pad = (8 - len(data) % 8) % 8
    return struct.pack("<Q", len(data)) + data + b"\0" * pad


def _tokens(*items: bytes) -> bytes:
    return b"".join(_str(i) for i in items)


Filter = Callable[[Path], bool]


def nar_chunks(
    path: Path, include: Filter | None = None, file_cap: int | None = None
) -> Iterator[bytes]:
    """Stream the NAR of `path`; `include(p)` may drop entries below the root. `file_cap`: a
    regular file larger than this is refused by its lstat size before a byte is read (a task
    tree a user points at: a sparse giant costs nothing)."""
    yield _str(b"nix-archive-1")
    yield from _node(path, include, file_cap)


def _node(path: Path, include: Filter | None, file_cap: int | None = None) -> Iterator[bytes]:
    st = os.lstat(path)
    if file_cap is not None and stat.S_ISREG(st.st_mode) and st.st_size > file_cap:
        raise InputError(f"is {st.st_size} bytes; the limit is {file_cap} bytes", file=str(path))
    yield _str(b"(")
    if stat.S_ISLNK(st.st_mode):
        yield _tokens(b"type", b"symlink", b"target", os.fsencode(os.readlink(path)))
    elif stat.S_ISREG(st.st_mode):
        yield _tokens(b"type", b"regular")
        if st.st_mode & stat.S_IXUSR:
            yield _tokens(b"executable", b"")
        yield _str(b"contents")
        yield struct.pack("<Q", st.st_size)
        size = 0
        # non-blocking, no symlink: a FIFO or a link swapped in after the lstat is refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{path} changed while it was being hashed")
        with os.fdopen(fd, "rb") as fh:
            while block := fh.read(1 << 20):
                size += len(block)
                yield block
        if size != st.st_size:
            raise OSError(f"{path} changed while it was being hashed")
        yield b"\0" * ((8 - size % 8) % 8)
    elif stat.S_ISDIR(st.st_mode):
        yield _tokens(b"type", b"directory")
        names = sorted(os.fsencode(n) for n in os.listdir(path))
        for name in names:
            child = path / os.fsdecode(name)
            if include is not None and not include(child):
                continue
            yield _tokens(b"entry", b"(", b"name", name, b"node")
            yield from _node(child, include, file_cap)
            yield _str(b")")
    else:
        raise OSError(f"{path}: a NAR holds only files, directories and symlinks")
    yield _str(b")")


def nar_sha256(path: Path, include: Filter | None = None, file_cap: int | None = None) -> str:
    """Hex SHA-256 of the NAR of `path` (what `nix hash path --base16` prints)."""
    h = hashlib.sha256()
    for chunk in nar_chunks(path, include, file_cap):
        h.update(chunk)
    return h.hexdigest()


# A virtual directory: names mapped to real paths or to nested virtual directories. It lets us hash
# exactly a declared selection of a checkout without copying it anywhere first.
VirtualTree = dict[str, "Path | VirtualTree"]


def nar_chunks_virtual(tree: VirtualTree, include: Filter | None = None) -> Iterator[bytes]:
    yield _str(b"nix-archive-1")
    yield from _virtual_node(tree, include)


def _virtual_node(tree: VirtualTree, include: Filter | None) -> Iterator[bytes]:
    yield _tokens(b"(", b"type", b"directory")
    for name in sorted(tree, key=os.fsencode):
        child = tree[name]
        yield _tokens(b"entry", b"(", b"name", os.fsencode(name), b"node")
        if isinstance(child, dict):
            yield from _virtual_node(child, include)
        else:
            yield from _node(child, include)
        yield _str(b")")
    yield _str(b")")


def nar_sha256_virtual(tree: VirtualTree, include: Filter | None = None) -> str:
    h = hashlib.sha256()
    for chunk in nar_chunks_virtual(tree, include):
        h.update(chunk)
    return h.hexdigest()
