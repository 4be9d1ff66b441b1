"""A `command:` subject that only looks: everything a subject can reach, dumped for the leak test.

Standard library only (it runs as the subject uid with the system python3). At start it records
its argv, its environment, the task file (AFB_TASK_FILE), every file of its state directory, the
tool interposer's tool listing (`GET /tools`), the MCP tool listing when it has an MCP endpoint
(raw JSON-RPC over Streamable HTTP), and the sandbox as it sees it at run time (a tar of its
non-system folders through the `exec` tool, base64; the image as a whole is scanned apart).
It writes all of that to `$AFB_STATE_DIR/spy.json` and exits 0 without submitting anything.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.parse
from typing import Any


def request(url: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    try:
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def mcp_tools(url: str) -> Any:
    path = urllib.parse.urlsplit(url).path
    accept = {"Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "spy", "version": "1"}}}  # fmt: skip
    _, h, raw = request(url, "POST", path, init, accept)
    version = json.loads(raw)["result"]["protocolVersion"]
    session = {"mcp-session-id": h["mcp-session-id"]} if "mcp-session-id" in h else {}
    more = {**accept, **session, "MCP-Protocol-Version": version}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    request(url, "POST", path, done, more)
    _, _, raw = request(
        url, "POST", path, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, more
    )
    return json.loads(raw)


def main() -> int:
    env = dict(os.environ)
    state = env["AFB_STATE_DIR"]
    files = {}
    for base, _, names in os.walk(state):
        for n in names:
            p = os.path.join(base, n)
            with open(p, "rb") as fh:
                files[os.path.relpath(p, state)] = fh.read().decode("utf-8", "replace")
    with open(env["AFB_TASK_FILE"], encoding="utf-8") as fh:
        task = json.load(fh)
    ip = env["AFB_INTERPOSER_URL"]
    _, _, listing = request(ip, "GET", "/tools")
    _, _, raw = request(ip, "POST", "/session", {})
    sid = json.loads(raw)["session_id"]
    # what the sandbox holds besides the system: sources, scratch, homes, config
    dirs = "opt tmp root home srv var/tmp run etc mnt media"
    tar = ["sh", "-c", f"cd / && tar -cz --ignore-failed-read {dirs} 2>/dev/null | base64 -w0"]
    _, _, raw = request(ip, "POST", "/call", {"session_id": sid, "tool": "exec",
                                           "args": {"argv": tar, "timeout": 600}})  # fmt: skip
    sandbox = json.loads(raw)
    dump = {
        "argv": sys.argv,
        "env": env,
        "task": task,
        "state_files": files,
        "http_tools": json.loads(listing),
        "mcp_tools": mcp_tools(env["AFB_MCP_URL"]) if env.get("AFB_MCP_URL") else None,
        "sandbox_tgz_b64": sandbox.get("result", {}).get("stdout", ""),
        "sandbox_ok": sandbox.get("ok"),
    }
    with open(os.path.join(state, "spy.json"), "w", encoding="utf-8") as fh:
        json.dump(dump, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
