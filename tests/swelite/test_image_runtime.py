"""The sandbox image: reproducible from its declared inputs, and grading inside it works.

Needs root, Podman and mmdebstrap, and the Debian mirror from the host's apt configuration.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.benchmarks.swe_lite.grade import grade, podman_exec
from runner.imagebuild import archive
from runner.imagebuild import builder as images
from tests.swelite.conftest import IMAGE_DIR, all_tasks, image_tools_missing

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.skipif(image_tools_missing() is not None, reason=str(image_tools_missing())),
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_build_twice_same_image_id(tmp_path: Path, sdists: dict[str, Path]) -> None:
    a = images.build_image(IMAGE_DIR, out_dir=tmp_path / "a", load=False)
    b = images.build_image(IMAGE_DIR, out_dir=tmp_path / "b", load=False)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", a.image_id)
    assert a.image_id == b.image_id
    assert a.layer_digest == b.layer_digest
    assert a.input_digest == b.input_digest == images.image_input_digest(IMAGE_DIR)
    assert a.archive and b.archive
    assert _sha256(Path(a.archive)) == _sha256(Path(b.archive))


@pytest.fixture(scope="module")
def swelite_image(sdists: dict[str, Path]) -> images.BuiltImage:
    img = images.ensure_image(IMAGE_DIR)
    assert images.image_id(img.tag) == img.image_id
    assert images.image_identity(IMAGE_DIR)["image_id"] == img.image_id
    return img


def _start(tag: str) -> str:
    name = f"swelite-test-{uuid.uuid4().hex[:10]}"
    subprocess.run(
        [
            "podman",
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            "--network",
            "none",
            "--cap-drop",
            "all",
            "--security-opt",
            "no-new-privileges",
            tag,
        ],
        check=True,
        capture_output=True,
    )
    return name


def _stop(name: str) -> None:
    subprocess.run(["podman", "rm", "-f", "-t", "2", name], capture_output=True)


@pytest.fixture(scope="module")
def container(swelite_image: images.BuiltImage) -> Iterator[str]:
    name = _start(swelite_image.tag)
    try:
        yield name
    finally:
        _stop(name)


def _boot_token(ctr: str) -> str:
    rc, out, _ = podman_exec(ctr)(["sh", "-c", f"cat {archive.BOOT_TOKEN_PATH}"], b"")
    assert rc == 0
    return out.decode().strip()


def test_entrypoint_writes_fresh_boot_token(swelite_image: images.BuiltImage) -> None:
    tokens = []
    for _ in range(2):
        name = _start(swelite_image.tag)
        try:
            for _ in range(50):
                rc, _, _ = podman_exec(name)(["test", "-s", archive.BOOT_TOKEN_PATH], b"")
                if rc == 0:
                    break
            tokens.append(_boot_token(name))
        finally:
            _stop(name)
    for tok in tokens:
        assert re.fullmatch(r"\d+ [0-9a-f-]{36}", tok), tok
    assert tokens[0] != tokens[1]


def test_image_has_tools_and_sources(container: str) -> None:
    ex = podman_exec(container)
    rc, out, err = ex(["python3", "-m", "pytest", "--version"], b"")
    assert rc == 0, err
    rc, out, _ = ex(["ls", "/opt/swe-lite/src"], b"")
    roots = {t.source.root for t in all_tasks()}
    assert roots <= set(out.decode().split())
    rc, _, _ = ex(["ls", "/opt/swe-lite/tasks"], b"")
    assert rc != 0  # task files (gold patches!) are never baked into the sandbox


@pytest.mark.slow
@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_grading_in_container(container: str, task) -> None:  # type: ignore[no-untyped-def]
    ex = podman_exec(container)
    gold = grade(ex, task, task.gold_patch)
    assert gold.resolved, gold.log
    empty = grade(ex, task, b"")
    assert not empty.resolved
    assert empty.fail_to_pass["failure"] == list(task.fail_to_pass), empty.log
    assert empty.pass_to_pass["failure"] == [], empty.log
