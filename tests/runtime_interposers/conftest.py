"""Helpers for the interposer tests: real servers on loopback, a local-subprocess sandbox."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import pytest

from runner.evaluator.evidence.journal import EvidenceStore, Journal
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.sandbox.base import ExecResult

CELL = "sha256:" + "ab" * 32


class LocalSandbox:
    """Sandbox stand-in for unit tests: subprocesses and files under a temp root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _p(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> ExecResult:
        r = subprocess.run(argv, cwd=self.root, input=stdin, capture_output=True, timeout=timeout)
        return ExecResult(exit_code=r.returncode, stdout=r.stdout, stderr=r.stderr)

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        p = self._p(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)

    def get_file(self, path: str) -> bytes:
        return self._p(path).read_bytes()


@pytest.fixture
def run_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="afb-ip-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def journal(run_dir: Path) -> Iterator[Journal]:
    with EvidenceStore(run_dir).journal("attempt") as j:
        yield j


@pytest.fixture
def destination(run_dir: Path) -> Iterator[DestinationService]:
    with DestinationService(run_dir / "destination" / "ledger.jsonl") as d:
        yield d


def request(
    addr: tuple[str, int],
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, Any]:
    """One HTTP request on a fresh connection; (status, parsed JSON body)."""
    conn = http.client.HTTPConnection(*addr, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def effect(scope: str, n: int = 0, key: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"scope": scope, "kind": "patch", "payload": {"n": n}}
    if key is not None:
        body["idempotency_key"] = key
    return body


@dataclass
class H11Client:
    """A raw-socket HTTP/1.1 client that counts exactly the bytes on its wire."""

    addr: tuple[str, int]
    sent: int = 0
    received: int = 0
    sock: socket.socket = field(init=False)
    conn: h11.Connection = field(init=False)

    def __post_init__(self) -> None:
        self.sock = socket.create_connection(self.addr, timeout=10)
        self.conn = h11.Connection(h11.CLIENT)

    def _send(self, data: bytes | None) -> None:
        if data:
            self.sock.sendall(data)
            self.sent += len(data)

    def request(
        self, method: str, target: str, body: bytes, extra: list[tuple[str, str]]
    ) -> tuple[int, bytes]:
        headers = [("Host", "dest"), ("Content-Length", str(len(body))), *extra]
        self._send(self.conn.send(h11.Request(method=method, target=target, headers=headers)))
        if body:
            self._send(self.conn.send(h11.Data(data=body)))
        self._send(self.conn.send(h11.EndOfMessage()))
        status, out = 0, bytearray()
        while True:
            ev = self.conn.next_event()
            if ev is h11.NEED_DATA:
                data = self.sock.recv(65536)
                self.received += len(data)
                self.conn.receive_data(data)
            elif isinstance(ev, h11.Response):
                status = ev.status_code
            elif isinstance(ev, h11.Data):
                out += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                self.conn.start_next_cycle()
                return status, bytes(out)

    def close(self) -> None:
        self.sock.close()


class CountingUpstream:
    """An h11 HTTP server counting the exact bytes it received and sent (keep-alive)."""

    def __init__(self, reply: bytes = b'{"ok":true}') -> None:
        self.reply = reply
        self.received = 0
        self.sent = 0
        self.requests: list[tuple[str, bytes, list[tuple[bytes, bytes]]]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(sock,), daemon=True).start()

    def _conn(self, sock: socket.socket) -> None:
        conn = h11.Connection(h11.SERVER)
        body = bytearray()
        target = ""
        headers: list[tuple[bytes, bytes]] = []
        with sock:
            while True:
                ev = conn.next_event()
                if ev is h11.NEED_DATA:
                    data = sock.recv(65536)
                    self.received += len(data)
                    conn.receive_data(data)
                elif isinstance(ev, h11.Request):
                    target, headers = ev.target.decode(), list(ev.headers)
                elif isinstance(ev, h11.Data):
                    body += ev.data
                elif isinstance(ev, h11.EndOfMessage):
                    self.requests.append((target, bytes(body), headers))
                    body = bytearray()
                    hdrs = [
                        ("Content-Type", "application/json"),
                        ("Content-Length", str(len(self.reply))),
                    ]
                    for out in (
                        conn.send(h11.Response(status_code=201, headers=hdrs)),
                        conn.send(h11.Data(data=self.reply)),
                        conn.send(h11.EndOfMessage()),
                    ):
                        sock.sendall(out)
                        self.sent += len(out)
                    conn.start_next_cycle()
                else:
                    return

    def close(self) -> None:
        self.listener.close()
