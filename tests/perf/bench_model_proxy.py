"""Model proxy overhead per call in replay mode vs a direct local HTTP round trip (not a test).

    cd /work/main && .venv/bin/python tests/perf/bench_model_proxy.py [-n 300]

The same request (a ~8 KB chat conversation) and the same response bytes two ways, from one
keep-alive httpx client:

- direct: a stdlib ThreadingHTTPServer on 127.0.0.1 answering the response bytes;
- proxy:  ModelProxy in replay mode (front egress proxy -> backend: parse, normalize, content
  address, cassette lookup, ledger) serving the same bytes from a cassette.

Non-streaming (a ~1 KB chat.completion) and streaming (an SSE body of 300 chunks, ~60 KB).
Prints median and p90 per call and the median ratio proxy/direct; for context also the stock
egress proxy (the destination's, without TCP_NODELAY) in front of the direct server.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from runner.runtime.cassettes.format import (
    Cassette,
    RecordedExchange,
    RecordedResponse,
    normalize_request,
    request_key,
)
from runner.runtime.interposers.egress import EgressProxy
from runner.runtime.interposers.modelproxy import ModelProxy


def request(stream: bool) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent. " * 20}]
    for i in range(12):
        msgs.append({"role": "user", "content": f"observation {i}: " + "ok " * 100})
        msgs.append({"role": "assistant", "content": f"thought {i}: " + "hmm " * 60})
    return {"model": "bench-model", "messages": msgs, "stream": stream, "temperature": 0}


def response(stream: bool) -> tuple[str, bytes]:
    head = {"id": "chatcmpl-bench", "created": 0, "model": "bench-model"}
    if not stream:
        msg = {"role": "assistant", "content": "the answer is " + "forty-two " * 80}
        body = {
            **head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 200, "total_tokens": 2200},
        }
        return "application/json", json.dumps(body).encode()
    out = []
    for i in range(300):
        delta = {"content": f"token{i} and more "}
        chunk = {**head, "object": "chat.completion.chunk", "choices": [{"index": 0}]}
        chunk["choices"][0].update(delta=delta, finish_reason=None)
        out.append(f"data: {json.dumps(chunk)}\n\n")
    out.append("data: [DONE]\n\n")
    return "text/event-stream", "".join(out).encode()


class _Direct(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        ctype, data = self.server.answers[json.loads(raw)["stream"]]
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def measure(client: httpx.Client, url: str, body: dict[str, Any], n: int) -> list[float]:
    raw = json.dumps(body).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer dummy"}
    for _ in range(20):  # warm-up: connections, caches
        client.post(url, content=raw, headers=headers).raise_for_status()
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.post(url, content=raw, headers=headers)
        r.read()
        xs.append(time.perf_counter() - t0)
        r.raise_for_status()
    return xs


def summary(name: str, xs: list[float]) -> float:
    med = statistics.median(xs)
    p90 = sorted(xs)[max(0, int(len(xs) * 0.9) - 1)]
    print(f"{name:<28} median {med * 1e3:7.3f} ms   p90 {p90 * 1e3:7.3f} ms   n={len(xs)}")
    return med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300)
    n = ap.parse_args().n
    answers = {s: response(s) for s in (False, True)}
    entries = []
    for s in (False, True):
        norm = normalize_request(request(s))
        ctype, data = answers[s]
        entries.append(
            RecordedExchange(
                key=request_key("openai-chat", norm),
                occurrence=1,
                dialect="openai-chat",
                request=norm,
                response=RecordedResponse(status=200, content_type=ctype, body=data.decode()),
            )
        )
    # every call repeats the request: reuse_last serves occurrence 1 again
    cassette = Cassette(version=1, kind="recorded", on_repeat="reuse_last", recorded=tuple(entries))
    direct = ThreadingHTTPServer(("127.0.0.1", 0), _Direct)
    direct.daemon_threads = True
    direct.answers = answers  # type: ignore[attr-defined]
    threading.Thread(target=direct.serve_forever, args=(0.05,), daemon=True).start()
    dhost, dport = direct.server_address[:2]
    try:
        with ModelProxy("replay", cassette=cassette) as proxy, httpx.Client(timeout=30) as c:
            purl = proxy.base_urls()["OPENAI_BASE_URL"] + "/chat/completions"
            durl = f"http://{dhost}:{dport}/v1/chat/completions"
            for s in (False, True):
                label = "stream" if s else "plain"
                size = len(answers[s][1])
                print(f"-- {label}: request {len(json.dumps(request(s)))} B, response {size} B")
                d = summary(f"direct {label}", measure(c, durl, request(s), n))
                p = summary(f"proxy replay {label}", measure(c, purl, request(s), n))
                print(f"{'ratio proxy/direct':<28} {p / d:7.2f}x   overhead {1e3 * (p - d):.3f} ms")
            assert proxy.divergences() == []
            # context: the stock egress proxy (no TCP_NODELAY) in front of the direct server
            with EgressProxy((str(dhost), int(dport))) as stock:
                surl = "http://{}:{}/v1/chat/completions".format(*stock.address)
                summary("stock egress proxy plain", measure(c, surl, request(False), n // 10))
    finally:
        direct.shutdown()
        direct.server_close()


if __name__ == "__main__":
    main()
