"""tests/conftest.py: under AFB_REQUIRE_REAL=1 a skip for a missing real part fails the run.

Each case runs a tiny suite in a temporary directory (pytester, in process) with this
repository's tests/conftest.py as its conftest, once with the variable and once without.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

SUITE = """
import pytest

@pytest.fixture(scope="session")
def podman():
    pytest.skip("podman not installed")

def test_body_skip():
    pytest.skip("needs podman")

@pytest.mark.skipif(True, reason="nft not installed")
def test_mark_skip():
    pass

def test_fixture_skip(podman):
    pass

def test_optional_skip():
    pytest.skip("optional: AFB_SOME_DEV_TOOL unset")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

def test_plain():
    pass
"""


@pytest.fixture(autouse=True)
def _inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    # The inner runs need no installed plugins (loading hypothesis's alone takes about a second).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> pytest.RunResult:
    pytester.makepyfile(test_suite=SUITE)
    if value is None:
        monkeypatch.delenv("AFB_REQUIRE_REAL", raising=False)
    else:
        monkeypatch.setenv("AFB_REQUIRE_REAL", value)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")


def test_required_missing_real_part_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, "1")
    # body skip -> failed; skipif mark and fixture skip happen at setup -> errors.
    result.assert_outcomes(passed=1, failed=1, errors=2, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    for reason in ("needs podman", "nft not installed", "podman not installed"):
        assert f"AFB_REQUIRE_REAL=1: a missing real part is a failure, not a skip: {reason}" in out
    assert "SKIPPED" in out and "optional: AFB_SOME_DEV_TOOL unset" in out


@pytest.mark.parametrize("value", [None, "0"])
def test_not_required_skips_stay_skips(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    result = _run(pytester, monkeypatch, value)
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)
    assert result.ret == pytest.ExitCode.OK


def test_module_level_skip_fails_when_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_mod='import pytest\npytest.skip("nix not installed", allow_module_level=True)\n'
    )
    monkeypatch.setenv("AFB_REQUIRE_REAL", "1")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "a missing real part is a failure, not a skip: nix not installed" in result.stdout.str()
    monkeypatch.delenv("AFB_REQUIRE_REAL")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(skipped=1)
