"""core/bounded.py: the file type is checked before opening (nothing blocks), the size before
reading (nothing huge is read), a symlink is refused for evidence and followed for input, and
every failure is an InputError (exit 2) or EvidenceError (exit 3) naming the path."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest

from runner.evaluator.core.bounded import (
    lines_bounded,
    read_bounded,
    read_text_bounded,
    sha256_bounded,
)
from runner.evaluator.core.errors import EvidenceError, InputError


def _sock(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


@pytest.mark.parametrize("evidence", [False, True])
def test_non_regular_files_and_bad_paths_are_refused_without_opening(
    tmp_path: Path, evidence: bool
) -> None:
    error = EvidenceError if evidence else InputError
    os.mkfifo(tmp_path / "fifo")
    _sock(tmp_path / "sock")
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cases = {
        "fifo": "FIFO",
        "sock": "socket",
        "dir": "directory",
        "missing": "No such file",
        "loop": "symbolic links" if not evidence else "symlink",
        "a\0b": "NUL",
        "x" * 300: "longer than 255",
    }
    for name, says in cases.items():
        with pytest.raises(error, match=says):
            read_bounded(tmp_path / name, 1 << 20, evidence=evidence)


def test_a_symlink_is_followed_for_input_and_refused_for_evidence(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_bounded(tmp_path / "link", 10) == b"data"
    with pytest.raises(EvidenceError, match="symlink"):
        read_bounded(tmp_path / "link", 10, evidence=True)


def test_the_size_cap_is_exact(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_bounded(f, 100) == b"x" * 100
    assert sha256_bounded(f, 100) == "sha256:" + hashlib.sha256(b"x" * 100).hexdigest()
    with pytest.raises(InputError, match="limit is 99"):
        read_bounded(f, 99)
    with pytest.raises(EvidenceError, match="limit is 99"):
        sha256_bounded(f, 99)


def test_text_and_lines(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"a\nbb\nccc")
    assert list(lines_bounded(f, 4, 100)) == [b"a\n", b"bb\n", b"ccc"]
    with pytest.raises(EvidenceError, match="line 2 is longer than 2"):
        list(lines_bounded(f, 2, 100))
    f.write_bytes(b"\xff")
    with pytest.raises(InputError, match="not UTF-8"):
        read_text_bounded(f, 10)
