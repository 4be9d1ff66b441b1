"""One lifecycle for the benchmark's small servers (tool interposer, egress proxy, destination):
a socketserver on a daemon thread, with `address`, `start`, `stop` and context management; and
`JsonHandler`, the JSON-over-HTTP/1.1 request handler the destinations share."""

from __future__ import annotations

import json
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar, Generic, Self, TypeVar

S = TypeVar("S", bound=socketserver.BaseServer)


class JsonHandler(BaseHTTPRequestHandler):
    """JSON bodies both ways, keep-alive with Content-Length framing, no access log (the
    evidence is what the server records, not its log)."""

    protocol_version = "HTTP/1.1"
    max_body: ClassVar[int] = 4 * 1024 * 1024

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> Any:
        """The request's JSON body (`null` if empty); ValueError if its length is missing,
        negative or over `max_body`, or it is not JSON."""
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = -1
        if not 0 <= n <= self.max_body:
            raise ValueError("bad Content-Length")
        return json.loads(self.rfile.read(n) or b"null")


class ServedInThread(Generic[S]):
    label: ClassVar[str]  # thread name and error messages

    def __init__(self, bind: tuple[str, int]) -> None:
        self._bind = bind
        self._server: S | None = None
        self._thread: threading.Thread | None = None

    def _make_server(self) -> S:
        """Create the bound server and attach what its handlers need."""
        raise NotImplementedError

    def _on_stop(self, server: S) -> None:
        """After the server stopped accepting, before its thread is joined."""

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError(f"{self.label} not started")
        addr: Any = self._server.server_address  # type: ignore[attr-defined]
        return str(addr[0]), int(addr[1])

    def _handle_error(self, request: Any, client_address: Any) -> None:
        # A handler's exception said in one line: e.g. a full disk while a call is journaled,
        # an error the run itself reports (exit 2); a server thread's traceback would bury it.
        exc = sys.exc_info()[1]
        print(
            f"{self.label}: a call from {client_address} failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )

    def start(self) -> Self:
        self._server = server = self._make_server()
        server.handle_error = self._handle_error  # type: ignore[method-assign]
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name=f"afb-{self.label}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._on_stop(server)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
