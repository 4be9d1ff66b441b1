"""MCP tool-call latency vs the interposer's HTTP tool API, for the same `exec` (not a test).

    cd /work/main && .venv/bin/python tests/perf/bench_mcp.py [-n 200] [--podman]

Both wires reach the same `ToolInterposer` (same dispatch, same events to a no-fault sink), so
the difference is the transport: HTTP/1.1 JSON (one keep-alive connection, and a fresh connection
per call as the reference subjects do) against MCP Streamable HTTP through the `mcp` SDK's client
(one session; the 2025 handshake wire and the 2026-07-28 sessionless wire). Sandboxes:
`null` (exec returns at once: transport overhead alone), `local` (a real subprocess), and with
`--podman` (root) the real Podman sandbox. Prints medians, p90s and the MCP/HTTP ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp import Client

from runner.runtime.interposers.mcp_tools import McpToolServer
from runner.runtime.interposers.tools import ToolInterposer, ToolSandbox
from runner.runtime.sandbox.base import ExecResult
from tests.runtime_interposers.conftest import LocalSandbox

ARGS = {"argv": ["true"]}


class NullSandbox:
    def exec(self, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0) -> Any:
        return ExecResult(exit_code=0, stdout=b"", stderr=b"")

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        pass

    def get_file(self, path: str) -> bytes:
        return b""


def summary(name: str, xs: list[float]) -> float:
    med = statistics.median(xs)
    p90 = sorted(xs)[max(0, int(len(xs) * 0.9) - 1)]
    print(f"  {name:<40} median {med * 1000:8.2f} ms   p90 {p90 * 1000:8.2f} ms   n={len(xs)}")
    return med


def http_keepalive(ti: ToolInterposer, n: int) -> list[float]:
    conn = http.client.HTTPConnection(*ti.address, timeout=60)

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out: dict[str, Any] = json.loads(resp.read())
        assert resp.status == 200, out
        return out

    sid = post("/session", {})["session_id"]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert post("/call", {"session_id": sid, "tool": "exec", "args": ARGS})["ok"]
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


def http_fresh(ti: ToolInterposer, n: int) -> list[float]:
    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection(*ti.address, timeout=60)
        try:
            hdrs = {"Content-Type": "application/json"}
            conn.request("POST", path, json.dumps(body).encode(), hdrs)
            out: dict[str, Any] = json.loads(conn.getresponse().read())
            return out
        finally:
            conn.close()

    sid = post("/session", {})["session_id"]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert post("/call", {"session_id": sid, "tool": "exec", "args": ARGS})["ok"]
        out.append(time.perf_counter() - t0)
    return out


def mcp_session(url: str, n: int, mode: str) -> list[float]:
    async def go() -> list[float]:
        out = []
        async with Client(url, mode=mode, cache=None) as c:
            await c.call_tool("exec", ARGS)  # warm: session, tool list
            for _ in range(n):
                t0 = time.perf_counter()
                r = await c.call_tool("exec", ARGS)
                out.append(time.perf_counter() - t0)
                assert not r.is_error, r
        return out

    return asyncio.run(go())


@contextmanager
def podman_sandbox() -> Iterator[ToolSandbox]:
    from runner.runtime.host import naming
    from runner.runtime.host.podman_service import PodmanService
    from runner.runtime.sandbox import testimage
    from runner.runtime.sandbox.base import SandboxSpec
    from runner.runtime.sandbox.podman import PodmanSandbox

    rid = naming.new_run_id()
    d = Path(tempfile.mkdtemp(prefix="afb-pm-"))
    try:
        with naming.hold_run(rid), PodmanService(rid, d) as svc:
            ref, _ = testimage.ensure_test_image()
            sb = PodmanSandbox(svc.url, SandboxSpec(run_id=rid, name_suffix="bench", image=ref))
            sb.create()
            try:
                sb.start()
                yield sb
            finally:
                sb.remove()
                sb.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench(label: str, sandbox: ToolSandbox, n: int) -> None:
    print(f"exec through the interposer, sandbox={label}")
    with ToolInterposer(sandbox) as ti, McpToolServer(ti) as m:
        runs: dict[str, Callable[[], list[float]]] = {
            "HTTP API, keep-alive connection": lambda: http_keepalive(ti, n),
            "HTTP API, fresh connection per call": lambda: http_fresh(ti, n),
            "MCP, 2025 handshake wire (session)": lambda: mcp_session(m.url, n, "legacy"),
            "MCP, 2026-07-28 wire (sessionless)": lambda: mcp_session(m.url, n, "auto"),
        }
        res = {name: summary(name, fn()) for name, fn in runs.items()}
    base = res["HTTP API, keep-alive connection"]
    fresh = res["HTTP API, fresh connection per call"]
    for name in list(res)[2:]:
        print(
            f"  ratio {name:<34} / HTTP keep-alive {res[name] / base:6.2f}x"
            f"   / HTTP fresh {res[name] / fresh:6.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--podman", action="store_true", help="also the real Podman sandbox (root)")
    a = ap.parse_args()
    bench("null", NullSandbox(), a.n)
    root = Path(tempfile.mkdtemp(prefix="afb-bm-"))
    try:
        bench("local (subprocess)", LocalSandbox(root), a.n)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if a.podman:
        with podman_sandbox() as sb:
            bench("podman", sb, max(20, a.n // 5))


if __name__ == "__main__":
    main()
