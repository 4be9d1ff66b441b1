"""Fast checks of the task manifest, declared image inputs and the pure helpers."""

from __future__ import annotations

import io
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from runner.benchmarks.swe_lite.grade import (
    is_test_path,
    parse_pytest_summary,
    patch_files,
    static_problems,
)
from runner.benchmarks.swe_lite.taskcheck import bucket_for, static_task_problems
from runner.imagebuild import archive, sources
from runner.imagebuild import builder as images
from tests.swelite.conftest import IMAGE_DIR, TASKS_ROOT, all_tasks


def test_task_set_shape() -> None:
    tasks = all_tasks()
    assert len(tasks) >= 8
    assert len({t.id for t in tasks}) == len(tasks)
    assert len({t.project for t in tasks}) >= 4
    hard = [t for t in tasks if t.bucket == "hard"]
    assert len(hard) >= 3
    assert all(t.bucket in ("easy", "hard") for t in tasks)


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_task_static(task) -> None:  # type: ignore[no-untyped-def]
    assert static_problems(task) == []
    # the one bucket rule (taskcheck.bucket_for), no gold line in problem.md, [provenance]
    assert task.bucket == bucket_for(task.gold_patch.decode(), len(task.fail_to_pass))
    assert static_task_problems(task) == []
    assert task.project == task.source.name
    assert task.summary
    for test_id in (*task.fail_to_pass, *task.pass_to_pass):
        path = test_id.split("::", 1)[0]
        assert is_test_path(path) and path.endswith(".py"), test_id


def test_sources_manifest_matches_image() -> None:
    specs = sources.load_sources(TASKS_ROOT / "sources.toml")
    used = {t.source.ref for t in all_tasks()}
    conf = images.load_image_toml(IMAGE_DIR)
    assert set(conf["task_sources"]["refs"]) == used == set(specs)
    for spec in specs.values():
        assert spec.filename.endswith((".tar.gz", ".zip"))
        assert spec.root.startswith(spec.name.replace("_", "-"))


def test_image_toml_is_plain_data() -> None:
    conf = images.load_image_toml(IMAGE_DIR)
    assert conf["suite"] == "bookworm"
    assert isinstance(conf["source_date_epoch"], int)
    assert set(conf["packages"]) >= {"python3", "python3-pytest", "patch"}
    assert (IMAGE_DIR / conf["entrypoint"]).is_file()
    # The workplace rule: no mirror host names in committed files.
    text = (IMAGE_DIR / "image.toml").read_text() + (TASKS_ROOT / "sources.toml").read_text()
    assert not re.search(r"https?://", text)


def _copy_inputs(tmp_path: Path) -> Path:
    img = tmp_path / "images" / "swe-lite"
    shutil.copytree(IMAGE_DIR, img)
    (tmp_path / "specs" / "swe-lite").mkdir(parents=True)
    shutil.copy(TASKS_ROOT / "sources.toml", tmp_path / "specs" / "swe-lite")
    return img


def test_input_digest_is_pure_and_sensitive(tmp_path: Path) -> None:
    d = images.image_input_digest(IMAGE_DIR)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", d)
    img = _copy_inputs(tmp_path)
    assert images.image_input_digest(img) == d  # location does not matter
    assert images.image_tag(img) == f"localhost/afb-swe-lite:{d[7:19]}"

    toml = img / "image.toml"
    toml.write_text(toml.read_text().replace("1704067200", "1704067201"))
    assert images.image_input_digest(img) != d
    toml.write_text(toml.read_text().replace("1704067201", "1704067200"))
    (img / "afb-init").write_text((img / "afb-init").read_text() + "\n# changed\n")
    assert images.image_input_digest(img) != d


def test_debian_mirror_from_apt_config(tmp_path: Path) -> None:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://sec.invalid/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    assert images.debian_mirror("bookworm", tmp_path) == "http://mirror.invalid/debian"
    (d / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb-src http://x.invalid/d bookworm main\n"
        "deb [signed-by=/k.gpg] http://one.invalid/debian bookworm main contrib\n"
    )
    assert images.debian_mirror("bookworm", tmp_path) == "http://one.invalid/debian"
    with pytest.raises(RuntimeError):
        images.debian_mirror("trixie", tmp_path)


def test_parse_pytest_summary() -> None:
    out = (
        "=== short test summary info ===\n"
        "PASSED t.py::A::test_ok\n"
        "PASSED t.py::A::test_sub\n"
        "SUBFAILED(x=1, f=<function <lambda> at 0x1>) t.py::A::test_sub\n"
        "FAILED t.py::test_bad - AssertionError: boom\n"
        "ERROR t.py::test_err - fixture missing\n"
        "PASSED t.py::test_err\n"
    )
    assert parse_pytest_summary(out) == {
        "t.py::A::test_ok": "PASSED",
        "t.py::A::test_sub": "FAILED",
        "t.py::test_bad": "FAILED",
        "t.py::test_err": "ERROR",
    }


def test_patch_files() -> None:
    patch = (
        b"diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n"
        b"-x\n+y\n--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+z\n"
    )
    assert patch_files(patch) == ["pkg/m.py", "tests/test_new.py"]


def test_patch_files_follows_hunk_counts() -> None:
    # A removed line reading "-- a/x" and an added one reading "++ b/y" are changes inside a
    # hunk, not file headers: the grader once took them for files the patch touches.
    patch = (
        b"--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,2 +1,2 @@\n"
        b"--- a/x\n+++ b/y\n keep\n--- a/pkg/deleted.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n"
    )
    assert patch_files(patch) == ["pkg/m.py", "pkg/deleted.py"]


def _synthetic_rootfs(mtime: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:

        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **kw: object) -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.size, ti.mtime, ti.uname, ti.gname = kind, len(data), mtime, "u", "g"
            ti.pax_headers = {"atime": "123.5"}
            for k, v in kw.items():
                setattr(ti, k, v)
            t.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        add("./", tarfile.DIRTYPE, mode=0o755)
        add("./usr/", tarfile.DIRTYPE, mode=0o755)
        add("./usr/bin/", tarfile.DIRTYPE, mode=0o755)
        add("./usr/bin/zz", data=b"binary", mode=0o755, uid=0, gid=0)
        add("./usr/bin/aa", tarfile.LNKTYPE, linkname="./usr/bin/zz")
        add("./usr/lib/", tarfile.DIRTYPE, mode=0o755)
        add("./usr/lib/x/__pycache__/", tarfile.DIRTYPE)
        add("./usr/lib/x/__pycache__/m.cpython-311.pyc", data=b"pyc")
        add("./dev/", tarfile.DIRTYPE, mode=0o755)
        add("./dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3)
        add("./etc/", tarfile.DIRTYPE, mode=0o755)
        add("./etc/link", tarfile.SYMTYPE, linkname="../usr/bin/zz", uid=7, gid=8)
    return buf.getvalue()


def test_write_layer_is_normalised(tmp_path: Path) -> None:
    outs = []
    for i, mtime in enumerate((2_000_000_000, 2_100_000_000)):  # build time differs
        src = tmp_path / f"rootfs{i}.tar"
        src.write_bytes(_synthetic_rootfs(mtime))
        out = io.BytesIO()
        archive.write_layer(src, out, epoch=1_700_000_000, entrypoint=b"#!/bin/sh\n")
        outs.append(out.getvalue())
    assert outs[0] == outs[1]
    with tarfile.open(fileobj=io.BytesIO(outs[0])) as t:
        members = t.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert "dev" in names and not any(n.startswith("dev/") for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert archive.ENTRYPOINT_PATH in names and "usr/local" in names
    by_name = {m.name: m for m in members}
    # The sorted-first name of a hard-link group carries the data.
    assert by_name["usr/bin/aa"].isreg() and by_name["usr/bin/aa"].size == 6
    assert by_name["usr/bin/zz"].islnk() and by_name["usr/bin/zz"].linkname == "usr/bin/aa"
    assert by_name["etc/link"].issym() and (by_name["etc/link"].uid, by_name["etc/link"].gid) == (
        7,
        8,
    )
    for m in members:
        assert m.mtime <= 1_700_000_000 and m.uname == "" and m.gname == ""
        assert not m.pax_headers


@pytest.mark.parametrize(("binary", "flag"), [(False, "--no-binary"), (True, "--only-binary")])
def test_fetch_pinned_caches_only_what_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binary: bool, flag: str
) -> None:
    """One pip download for sdists and wheels alike: the flag picks which; the hash decides."""
    import hashlib
    import stat

    fake_pip = tmp_path / "fakepip"
    fake_pip.write_text(
        '#!/bin/sh\necho "$@" > "$ARGS_OUT"\n'
        'while [ "$1" != "-d" ]; do shift; done\nprintf payload > "$2/mini-1.0.tar.gz"\n'
    )
    fake_pip.chmod(fake_pip.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("AFB_PIP", str(fake_pip))
    monkeypatch.setenv("ARGS_OUT", str(tmp_path / "args"))
    cache = tmp_path / "cache"
    good = hashlib.sha256(b"payload").hexdigest()
    with pytest.raises(sources.FetchError, match=r"mini==1\.0: sha256 mismatch: got " + good):
        sources.fetch_pinned("mini==1.0", "mini-1.0.tar.gz", "0" * 64, binary=binary, cache=cache)
    assert list(cache.iterdir()) == []  # nothing unverified stays
    got = sources.fetch_pinned("mini==1.0", "mini-1.0.tar.gz", good, binary=binary, cache=cache)
    assert got == cache / "mini-1.0.tar.gz" and got.read_bytes() == b"payload"
    args = (tmp_path / "args").read_text().split()
    assert args[:4] == ["download", "--no-deps", flag, ":all:"] and args[-1] == "mini==1.0"
    monkeypatch.setenv("AFB_PIP", "false")  # cached and verified: pip is not asked again
    assert sources.fetch_pinned("mini==1.0", got.name, good, binary=binary, cache=cache) == got
