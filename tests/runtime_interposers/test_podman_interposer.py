"""The tool interposer in front of a real Podman sandbox, including a restart under a session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner.runtime.interposers.tools import ToolInterposer
from runner.runtime.sandbox.base import Sandbox
from tests.podman_sandbox import running_test_sandbox
from tests.runtime_interposers.conftest import request

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with running_test_sandbox("interposer") as sb:
        yield sb


def test_tools_and_restart_through_podman(sandbox: Sandbox) -> None:
    with ToolInterposer(sandbox, run_tests_argv=["/bin/sh", "-c", "test -f /tmp/a.txt"]) as ti:
        sid = request(ti.address, "POST", "/session", {})[1]["session_id"]

        def call(tool: str, args: dict[str, object], session: str = sid) -> tuple[int, dict]:
            body = {"session_id": session, "tool": tool, "args": args}
            return request(ti.address, "POST", "/call", body, timeout=60)

        assert call("write_file", {"path": "/tmp/a.txt", "content": "in the box\n"})[0] == 200
        assert call("read_file", {"path": "/tmp/a.txt"})[1]["result"] == {"content": "in the box\n"}
        out = call("exec", {"argv": ["/bin/sh", "-c", "cat; echo err >&2; exit 4"], "stdin": "x"})
        assert out[1]["result"] == {"exit_code": 4, "stdout": "x", "stderr": "err\n"}
        assert call("run_tests", {})[1]["result"]["passed"] is True

        before = sandbox.identity()
        sandbox.restart()
        ti.bump_epoch()
        assert sandbox.identity().boot_token != before.boot_token
        assert call("exec", {"argv": ["true"]})[0] == 409
        sid2 = request(ti.address, "POST", "/session", {"previous_session_id": sid})[1]
        assert sid2["epoch"] == 2
        again = call("read_file", {"path": "/tmp/a.txt"}, sid2["session_id"])
        assert again[0] == 200 and again[1]["ok"] is True  # restart keeps the filesystem
        obs = ti.session_observation(1)
        assert obs["stale_session_failed"] and obs["reattached"] and obs["new_epoch"] == 2
        assert ti.counts() == {"exec": 1, "read_file": 2, "run_tests": 1, "write_file": 1}
