"""A real HTTP server on 127.0.0.1 (ephemeral port) that answers correctly or lies, per endpoint.

`lying_server.mode[path]` picks the behaviour of an endpoint; "ok" is the correct answer. The lies
are the four from the RFC thread, each an HTTP 200 in the end.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

HTML_ERROR = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>Bad Gateway</h1><p>The upstream server returned an invalid response.</p>"
    b"<hr><address>nginx</address></body></html>\n"
)
LOGIN_HTML = b"<!DOCTYPE html><html><body><form action='/login'>Sign in</form></body></html>"
FORUMS = ["cats", "dogs", "general", "rust"]


def _posts(forums: list[str], n: int) -> list[dict[str, Any]]:
    return [{"id": i, "submolt": forums[i % len(forums)], "title": f"post {i}"} for i in range(n)]


@dataclass
class LyingServer:
    base: str
    mode: dict[str, str] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


def _handler(state: LyingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, ctype: str, body: bytes, **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj: Any, status: int = 200) -> None:
            self._send(status, "application/json; charset=utf-8", json.dumps(obj).encode())

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            state.hits.append(self.path)
            query = parse_qs(parts.query)
            mode = state.mode.get(parts.path, "ok")
            if parts.path == "/login":
                if query.get("as") == ["json"]:
                    # A login page that even answers in JSON, shaped like the real thing.
                    return self._json({"id": 0, "followers_count": 0, "login_required": True})
                return self._send(200, "text/html; charset=utf-8", LOGIN_HTML)
            if parts.path == "/api/people/42":
                if mode == "ok":
                    return self._json({"id": 42, "followers_count": 1449, "karma": 299087})
                if mode == "html_in_json":
                    return self._send(200, "application/json", HTML_ERROR)
                if mode == "login_redirect":
                    return self._send(302, "text/html", b"", Location="/login?next=/api/people/42")
                if mode == "login_redirect_json":
                    return self._send(302, "text/html", b"", Location="/login?as=json")
            if parts.path == "/api/posts":
                forum = (query.get("submolt") or [None])[0]
                if mode == "ok":
                    return self._json(
                        {"success": True, "submolt": forum, "posts": _posts([forum or "?"], 3)}
                    )
                if mode == "filter_ignored":
                    # The filter is silently ignored: site-wide data, no echo.
                    return self._json({"success": True, "posts": _posts(FORUMS, 8)})
                if mode == "filter_ignored_echoed":
                    # Echoes the scope it was asked for, but the items are site-wide.
                    return self._json(
                        {"success": True, "submolt": forum, "posts": _posts(FORUMS, 8)}
                    )
                if mode == "too_many":
                    # Every item claims the scope, but there are more than the scope can hold.
                    return self._json(
                        {"success": True, "submolt": forum, "posts": _posts([forum or "?"], 500)}
                    )
            if parts.path == "/v1/messages":
                if mode == "ok":
                    return self._json(
                        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}
                    )
                if mode == "empty":
                    return self._json({"stop_reason": "end_turn", "content": []})
            return self._send(404, "text/plain", b"not found")

    return Handler


@pytest.fixture
def lying_server() -> Iterator[LyingServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    host, port = server.server_address[:2]
    state = LyingServer(base=f"http://{host}:{port}")
    server.RequestHandlerClass = _handler(state)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
