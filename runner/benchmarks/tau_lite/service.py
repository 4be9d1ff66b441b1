"""The tau-lite destination over HTTP: the runtime destination's wire contract, a real store.

It answers what runner/runtime/interposers/destination.py answers, so the runtime's ledger
reader (`runner.runtime.attempt.grading.make_read_ledger`, shape-checked) and the egress
proxy's effect routes work unchanged, plus the domain's tools:

- `POST /effects/<write tool>` `{scope, payload: <arguments>, idempotency_key?}` (the MCP
  effect route's body; `kind`, if sent, must name the same tool) -> `201 {effect_id, scope,
  committed: true, result}` when the domain committed it; `200 ... replayed: true` for a
  repeated idempotency key (capability on); `422 {effect_id, scope, committed: false, error}`
  when the domain refused it (journaled: the agent's error, not the harness's).
- `POST /effects` `{scope, kind: <write tool>, payload}`: the same, the tool named by `kind`.
- `POST /tools/<read or generic tool>` `{arguments}` -> `200 {ok, result}` / `422 {ok: false,
  error}`; nothing journaled.
- `GET /effects?scope=S` -> `200 {scope, items}`: the COMMITTED calls in commit order, each with
  `scope`, `effect_id`, `seq`, `kind` (the tool), `payload` (the arguments), `idempotency_key`,
  `call_id`, `intent`, `changed`, `state_after`. `GET /journal?scope=S`: every call, refusals too.
- `GET /capabilities` -> `{"idempotency_keys": bool, "domain": ...}`.
"""

from __future__ import annotations

from http import HTTPStatus
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from runner.benchmarks.tau_lite import domains
from runner.benchmarks.tau_lite.store import Store
from runner.runtime.interposers.serving import JsonHandler, ServedInThread

CALL_ID_HEADER = "X-AFB-Call-Id"  # the runtime destination's header, as the egress sends it


def ledger_item(row: dict[str, Any]) -> dict[str, Any]:
    """A committed ledger row as the runtime's ledger items look (plus the domain's fields)."""
    return {
        "effect_id": row["effect_id"],
        "seq": row["seq"],
        "scope": row["scope"],
        "kind": row["tool"],
        "tool": row["tool"],
        "payload": row["arguments"],
        "arguments": row["arguments"],
        "idempotency_key": row["idempotency_key"],
        "call_id": row["call_id"],
        "committed_at_ns": row["committed_at_ns"],
        "intent": row["intent"],
        "changed": row["changed"],
        "state_after": row["state_after"],
        "outcome": row["outcome"],
        "error": row["error"],
    }


class _Handler(JsonHandler):
    server: _Server
    max_body = 1024 * 1024

    def _scope(self, query: str) -> str | None:
        scopes = parse_qs(query).get("scope", [])
        if len(scopes) != 1 or not scopes[0]:
            self._reply(400, {"error": "exactly one non-empty scope parameter is required"})
            return None
        return scopes[0]

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        store = self.server.store
        if url.path == "/capabilities":
            self._reply(
                200, {"idempotency_keys": self.server.idempotency_keys, "domain": store.domain}
            )
        elif url.path in ("/effects", "/journal"):
            scope = self._scope(url.query)
            if scope is None:
                return
            rows = store.ledger(scope)
            if url.path == "/effects":
                rows = [r for r in rows if r["outcome"] == "committed"]
            self._reply(200, {"scope": scope, "items": [ledger_item(r) for r in rows]})
        else:
            self._reply(404, {"error": "not_found"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        try:
            body = self._read_json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            self.close_connection = True
            self._reply(400, {"error": f"bad request: {exc}"})
            return
        if path.startswith("/tools/"):
            self._read_tool(path.removeprefix("/tools/"), body)
        elif path == "/effects" or path.startswith("/effects/"):
            self._write_tool(path.removeprefix("/effects").removeprefix("/"), body)
        else:
            self._reply(404, {"error": "not_found"})

    def _read_tool(self, name: str, body: dict[str, Any]) -> None:
        tool = domains.TOOLS[self.server.store.domain].get(name)
        if tool is None or tool.kind == "write":
            self._reply(404, {"error": f"no read tool {name!r} (write tools: POST /effects/)"})
            return
        out = domains.call(self.server.store, name, body.get("arguments", {}), scope="-")
        self._reply(200 if out.ok else 422, out.as_json())

    def _write_tool(self, name: str, body: dict[str, Any]) -> None:
        scope, kind, key = body.get("scope"), body.get("kind"), body.get("idempotency_key")
        name = name or (kind if isinstance(kind, str) else "")
        bad = None
        if not (isinstance(scope, str) and scope):
            bad = "scope must be a non-empty string"
        elif kind is not None and kind not in (name, "patch"):  # "patch": an MCP route default
            bad = f"kind {kind!r} does not name the route's tool {name!r}"
        elif key is not None and not isinstance(key, str):
            bad = "idempotency_key must be a string"
        elif domains.TOOLS[self.server.store.domain].get(name) is None or (
            domains.TOOLS[self.server.store.domain][name].kind != "write"
        ):
            bad = f"no write tool {name!r}"
        if bad is not None:
            self._reply(400, {"error": f"bad request: {bad}"})
            return
        assert isinstance(scope, str)
        out = domains.call(
            self.server.store,
            name,
            body.get("payload", {}),
            scope=scope,
            idempotency_key=key,
            dedup=self.server.idempotency_keys,
            call_id=self.headers.get(CALL_ID_HEADER),
        )
        reply = {"effect_id": out.effect_id, "scope": scope, "committed": out.ok}
        if not out.ok:
            self._reply(HTTPStatus.UNPROCESSABLE_ENTITY, {**reply, "error": out.error})
            return
        reply["result"] = out.result
        if out.replayed:
            reply["replayed"] = True
        self._reply(HTTPStatus.OK if out.replayed else HTTPStatus.CREATED, reply)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    store: Store
    idempotency_keys: bool


class TauDestination(ServedInThread[_Server]):
    """`with TauDestination(store_path) as d: d.address` -> (host, port); owns the store."""

    label = "tau-destination"

    def __init__(
        self,
        store_path: Path,
        *,
        idempotency_keys: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.store_path = store_path
        self.idempotency_keys = idempotency_keys
        super().__init__((host, port))

    def _make_server(self) -> _Server:
        server = _Server(self._bind, _Handler)
        server.store = Store(self.store_path)
        server.idempotency_keys = self.idempotency_keys
        return server

    def _on_stop(self, server: _Server) -> None:
        server.store.close()
