"""`bench selftest --sandbox NAME` refuses what it cannot run with exit 2 and a message naming the
option and what is registered; it never starts a backend for a bad request (no root needed)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.runtime.sandbox import conformance, registry

cli = CliRunner()


def test_an_unknown_backend_names_the_registered_ones() -> None:
    res = cli.invoke(app, ["selftest", "--sandbox", "no-such-backend"])
    assert res.exit_code == 2, res.output
    assert "--sandbox" in res.output and "no-such-backend" in res.output
    assert all(name in res.output for name in registry.registered())
    assert "podman" in registry.registered() and "Traceback" not in res.output


def test_an_unknown_check_names_the_known_ones() -> None:
    res = cli.invoke(app, ["selftest", "--sandbox", "podman", "--check", "no_such_check"])
    assert res.exit_code == 2, res.output
    assert "no_such_check" in res.output and "--check" in res.output
    assert all(name in res.output for name in conformance.check_names())


@pytest.mark.parametrize(
    "args",
    [
        ["--check", "kill"],  # a conformance check without a backend
        ["--sandbox", "podman", "--kind", "sigkill"],  # fault kinds are the other self-test
        ["--sandbox", "podman", "--keep"],
    ],
)
def test_options_of_the_other_selftest_are_refused(args: list[str]) -> None:
    res = cli.invoke(app, ["selftest", *args])
    assert res.exit_code == 2, res.output
    assert "--sandbox" in res.output


def test_the_help_lists_the_sandbox_selftest() -> None:
    res = cli.invoke(app, ["selftest", "--help"])
    assert res.exit_code == 0 and "--sandbox" in res.output and "--check" in res.output
