"""The destination service: where irreversible effects land, with its own durable ledger.

HTTP/1.1 JSON API (stdlib ThreadingHTTPServer):

- `POST /effects` `{scope, kind, payload, idempotency_key?}` -> `201 {effect_id, scope,
  committed: true}`; with the idempotency capability on, a repeated (scope, key) returns the
  original effect with `200 ... replayed: true` and commits nothing.
- `GET /effects?scope=S` -> `200 {"scope": S, "items": [...]}`, items in commit order.
- `GET /capabilities` -> `{"idempotency_keys": bool}`.

The ledger is a JSONL file, one line per commit, fsync'd before the response is written, so
what the destination said it committed is exactly what a restarted destination still has. It
records the `X-AFB-Call-Id` header so a witness collector can find the effect of one call.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from runner.runtime.interposers.serving import JsonHandler, ServedInThread

CALL_ID_HEADER = "X-AFB-Call-Id"


class Ledger:
    """Append-only, fsync'd effect ledger (JSONL)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []
        self._keys: dict[tuple[str, str], dict[str, Any]] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            data = path.read_bytes()
            keep = data.rfind(b"\n") + 1
            if keep < len(data):  # torn tail of a crashed append: set aside, never built upon
                path.with_name(f"{path.name}.torn-{time.time_ns()}").write_bytes(data[keep:])
                with open(path, "r+b") as fh:
                    fh.truncate(keep)
                    os.fsync(fh.fileno())
            for line in data[:keep].splitlines():
                self._index(json.loads(line))
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)  # the file's name is durable too
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _index(self, item: dict[str, Any]) -> None:
        self._items.append(item)
        key = item.get("idempotency_key")
        if isinstance(key, str):
            self._keys.setdefault((item["scope"], key), item)

    def commit(
        self,
        *,
        scope: str,
        kind: str,
        payload: Any,
        idempotency_key: str | None,
        call_id: str | None,
        dedup: bool,
    ) -> tuple[dict[str, Any], bool]:
        """(item, replayed). Durable before it returns."""
        with self._lock:
            if dedup and idempotency_key is not None:
                prior = self._keys.get((scope, idempotency_key))
                if prior is not None:
                    return prior, True
            seq = len(self._items) + 1
            item = {
                "effect_id": f"eff-{seq:08d}",
                "seq": seq,
                "scope": scope,
                "kind": kind,
                "payload": payload,
                "idempotency_key": idempotency_key,
                "call_id": call_id,
                "committed_at_ns": str(time.time_ns()),
            }
            line = json.dumps(item, sort_keys=True, separators=(",", ":")).encode() + b"\n"
            os.write(self._fd, line)
            os.fsync(self._fd)
            self._index(item)
            return item, False

    def query(self, scope: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(i) for i in self._items if i["scope"] == scope]

    def status(self, scope: str) -> dict[str, Any]:
        """`submission_status`'s answer: what this ledger committed for `scope` (read-only)."""
        items = self.query(scope)
        return {
            "scope": scope,
            "committed": bool(items),
            "effects": len(items),
            "effect_ids": [str(i["effect_id"]) for i in items],
        }

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(i) for i in self._items]

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class _Handler(JsonHandler):
    server: _Server

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/capabilities":
            self._reply(200, {"idempotency_keys": self.server.idempotency_keys})
        elif url.path == "/effects":
            scopes = parse_qs(url.query).get("scope", [])
            if len(scopes) != 1 or not scopes[0]:
                self._reply(400, {"error": "exactly one non-empty scope parameter is required"})
                return
            items = self.server.ledger.query(scopes[0])
            self._reply(200, {"scope": scopes[0], "items": items})
        else:
            self._reply(404, {"error": "not_found"})

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/effects":
            self._reply(404, {"error": "not_found"})
            return
        try:
            body = self._read_json()
            scope, kind = body["scope"], body["kind"]
            key = body.get("idempotency_key")
            if not (isinstance(scope, str) and scope and isinstance(kind, str) and kind):
                raise ValueError("scope and kind must be non-empty strings")
            if key is not None and not isinstance(key, str):
                raise ValueError("idempotency_key must be a string")
        except (ValueError, KeyError, TypeError) as exc:
            self.close_connection = True  # the body may not have been consumed
            self._reply(400, {"error": f"bad request: {exc}"})
            return
        item, replayed = self.server.ledger.commit(
            scope=scope,
            kind=kind,
            payload=body.get("payload"),
            idempotency_key=key,
            call_id=self.headers.get(CALL_ID_HEADER),
            dedup=self.server.idempotency_keys,
        )
        out = {"effect_id": item["effect_id"], "scope": scope, "committed": True}
        if replayed:
            out["replayed"] = True
        self._reply(HTTPStatus.OK if replayed else HTTPStatus.CREATED, out)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ledger: Ledger
    idempotency_keys: bool


class DestinationService(ServedInThread["_Server"]):
    """`with DestinationService(ledger_path) as d: d.address` -> (host, port)."""

    label = "destination"

    def __init__(
        self,
        ledger_path: Path,
        *,
        idempotency_keys: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.ledger_path = ledger_path
        self.idempotency_keys = idempotency_keys
        super().__init__((host, port))

    @property
    def ledger(self) -> Ledger:
        if self._server is None:
            raise RuntimeError("destination not started")
        return self._server.ledger

    def _make_server(self) -> _Server:
        server = _Server(self._bind, _Handler)
        server.ledger = Ledger(self.ledger_path)
        server.idempotency_keys = self.idempotency_keys
        return server

    def _on_stop(self, server: _Server) -> None:
        server.ledger.close()
