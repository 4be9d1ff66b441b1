"""Suite-wide rule: in CI a test whose real part is missing fails; it is never quietly skipped.

Many tests need a real part of the machine: root, Podman and runc, nftables, network namespaces,
mmdebstrap, Nix, the sandbox image, the pinned task sources, ruff and mypy. On a developer
machine without one of them those tests skip, naming what is missing. In CI (`.ci/run` sets
``AFB_REQUIRE_REAL=1``) a skip would hide exactly what CI exists to exercise, so:

- With ``AFB_REQUIRE_REAL=1``, every skip is reported as a failure (an error when it happens in
  a fixture or a ``skipif`` mark, a failure in the test body, a collection error at module
  level), with the original reason in its message. This is fail-closed on purpose: a new skip
  about some real part nobody listed cannot slip through, whatever words its reason uses.
- The one exception is a skip that is legitimately conditional even in CI: one that depends on
  something CI does not provide by design (e.g. an optional dev-only tool whose path is given in
  an environment variable). Its reason must start with ``optional:`` (`OPTIONAL`), and the test's
  docstring must say why CI does not need it. Such skips stay skips. Today there is one:
  tests/reproducibility/test_nix_eval.py, which needs the dev-only nix-eval tool (AFB_NIX_EVAL).
- ``xfail`` is not a skip and is not affected. Deselection (``-m "not runtime"``) is not a skip
  either: the fast subset is unaffected, with or without the variable.

Without the variable (or with any other value) nothing changes.
tests/foundation/test_require_real.py proves both directions.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

REQUIRE_REAL = "AFB_REQUIRE_REAL"
OPTIONAL = "optional:"


def _required() -> bool:
    return os.environ.get(REQUIRE_REAL) == "1"


def _reason(longrepr: Any) -> str:
    # A skip's longrepr is (path, lineno, "Skipped: <reason>").
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def _harden(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail") or not _required():
        return
    reason = _reason(report.longrepr)
    if reason.startswith(OPTIONAL):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{REQUIRE_REAL}=1: a missing real part is a failure, not a skip: {reason}\n"
        f"(install what is missing with scripts/setup.sh; see tests/conftest.py)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _harden(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _harden(report)
    return report


@pytest.fixture(scope="session", autouse=True)
def _session_signing_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One throw-away signing key for the session (tests/keys.py): what `bench run`, `bench
    evaluate` and the synthetic runs sign with (AFB_KEY_DIR), trusted beside the repository's
    keys/trusted/ (AFB_TRUSTED_KEYS), so published bundles still verify against their key."""
    from tests.keys import TestKey

    key = TestKey.create(tmp_path_factory.mktemp("afb-session-key"))
    repository = Path(__file__).resolve().parents[1] / "keys" / "trusted"
    with pytest.MonkeyPatch.context() as mp:
        for name, value in key.env(repository).items():
            mp.setenv(name, value)
        yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `uv` (an older evaluator run through `uv run`, a wheel built with uv) skips
    naming what is missing when there is no uv: the fast loop runs green without it (a skip is
    a failure under AFB_REQUIRE_REAL=1, as for every other real part)."""
    if item.get_closest_marker("uv") is None:
        return
    from runner.history import uv_binary

    if uv_binary(Path(__file__).resolve().parents[1]) is None:
        pytest.skip("uv is not installed (scripts/setup.sh puts it in .tools/bin; or set AFB_UV)")
