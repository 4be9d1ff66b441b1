"""A handler's exception in a served thread is said in one line, never a traceback: a full disk
while a call is journaled is the run's error (exit 2), and a server thread's traceback would bury
it (tests/runtime/test_enospc.py holds the run to that)."""

from __future__ import annotations

import errno
import http.client
import json
import socket
import socketserver

import pytest

from runner.runtime.interposers.serving import JsonHandler, ServedInThread


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


class _Echo(JsonHandler):
    max_body = 16

    def do_POST(self) -> None:
        try:
            body = self._read_json()
        except ValueError as exc:
            self.close_connection = True
            self._reply(400, {"error": str(exc)})
            return
        self._reply(200, {"got": body})


class Echo(ServedInThread[_Server]):
    label = "echo"

    def _make_server(self) -> _Server:
        return _Server(self._bind, _Echo)


def _post(address: tuple[str, int], data: bytes) -> tuple[int, dict[str, object], str | None]:
    conn = http.client.HTTPConnection(*address, timeout=5)
    try:
        conn.request("POST", "/", body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp.getheader("Content-Type")
    finally:
        conn.close()


def test_json_handler_reads_within_its_own_body_limit() -> None:
    """JSON both ways; a body over the subclass's `max_body`, or not JSON, is a ValueError."""
    with Echo(("127.0.0.1", 0)) as server:
        assert _post(server.address, b'{"a": [1]}') == (
            200,
            {"got": {"a": [1]}},
            "application/json",
        )
        assert _post(server.address, b"") == (200, {"got": None}, "application/json")
        status, body, _ = _post(server.address, b'{"a": "' + b"x" * 16 + b'"}')
        assert (status, body) == (400, {"error": "bad Content-Length"})
        status, body, _ = _post(server.address, b"{nope")
        assert status == 400 and "Expecting property name" in str(body["error"])
