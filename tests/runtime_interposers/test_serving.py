"""A handler's exception in a served thread is said in one line, never a traceback: a full disk
while a call is journaled is the run's error (exit 2), and a server thread's traceback would bury
it (tests/runtime/test_enospc.py holds the run to that)."""

from __future__ import annotations

import errno
import socket
import socketserver

import pytest

from runner.runtime.interposers.serving import ServedInThread


class _Failing(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True


class Failing(ServedInThread[_Server]):
    label = "failing server"

    def _make_server(self) -> _Server:
        return _Server(self._bind, _Failing)


def test_a_handler_error_is_one_line_without_a_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with (
        Failing(("127.0.0.1", 0)) as server,
        socket.create_connection(server.address, timeout=5) as conn,
    ):
        conn.settimeout(5)
        assert conn.recv(1) == b""  # the handler failed and the connection closed
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("failing server: a call from ('127.0.0.1', ")
    assert line.endswith("failed: OSError: [Errno 28] No space left on device")
