"""A policy-model answer vs a scripted one (not a test; target: policy <= 1.1x scripted).

    .venv/bin/python tests/perf/bench_policy.py [-n 300]

The same conversation (mini-swe-agent-like, Chat Completions: a system prompt, 12 bash calls
with ~2 KB observations each, ~40 KB) answered two ways by the model proxy in `scripted` mode:

- scripted: a turn-numbered cassette (turn 12 of 14);
- policy:   the committed policy cassette of mini-swe-agent / careful for one task, whose rules
  are read over the conversation (every call's tool resolved by the command patterns, the last
  result classified, the status query looked for, the plan position derived).

Two figures per mode, streaming and not: the backend's answer alone (`BackendState.answer`, in
process: parse, key, select, render, ledger) and a full HTTP call through the proxy's front from
one keep-alive httpx client (what a subject sees). Prints medians and the ratio policy/scripted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx

from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol.cassette import Cassette, ScriptedTurn, ToolCall, load_cassette
from runner.runtime.interposers.modelproxy import ModelProxy
from runner.runtime.interposers.modelproxy.backend import BackendState

TASK = "cachetools-cached-info"
POLICY = project_root() / "specs/swe-lite-agents/policies/mini-swe-agent/careful" / f"{TASK}.json"


def conversation(stream: bool) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant. " * 40},
        {"role": "user", "content": "Task: fix the bug. " * 30},
    ]
    for i in range(12):
        fn = {"name": "bash", "arguments": json.dumps({"command": f"ls /tmp/work/{i} && cat x"})}
        call = {"id": f"call_bench_{i}", "type": "function", "function": fn}
        msgs.append({"role": "assistant", "content": f"step {i}", "tool_calls": [call]})
        out = json.dumps({"returncode": 0, "output": f"line {i} of output\n" * 110})
        msgs.append({"role": "tool", "tool_call_id": f"call_bench_{i}", "content": out})
    return {"model": "afb-scripted", "messages": msgs, "stream": stream}


def scripted() -> Cassette:
    turns = [
        ScriptedTurn(
            text=f"step {i}",
            tool_calls=(
                ToolCall(id=f"s{i}", name="bash", arguments={"command": "echo " + "x" * 200}),
            ),
        )
        for i in range(14)
    ]
    return Cassette(version=1, kind="scripted", turns=tuple(turns))


def paired(fns: dict[str, Callable[[], Any]], n: int) -> dict[str, float]:
    """Median seconds of each fn, measured alternately (a load change hits both alike)."""
    for _ in range(20):
        for fn in fns.values():
            fn()
    xs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            xs[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in xs.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300)
    n = ap.parse_args().n
    cassettes = {"scripted": scripted(), "policy": load_cassette(POLICY)}
    print(f"conversation: {len(json.dumps(conversation(False))) / 1024:.1f} KiB, n={n}")
    hdr = {"content-type": "application/json", "authorization": "Bearer dummy"}
    for stream in (False, True):
        body = conversation(stream)
        raw = json.dumps(body).encode()
        states = {k: BackendState("scripted", c, None, None) for k, c in cassettes.items()}
        backend = paired(
            {k: partial(st.answer, "openai-chat", {}, raw, body) for k, st in states.items()}, n
        )
        with contextlib.ExitStack() as stack, httpx.Client() as client:
            urls = {}
            for k, c in cassettes.items():
                proxy = stack.enter_context(ModelProxy("scripted", cassette=c))
                urls[k] = proxy.base_urls()["OPENAI_BASE_URL"] + "/chat/completions"
            http = paired(
                {k: partial(client.post, u, content=raw, headers=hdr) for k, u in urls.items()}, n
            )
        kind = "stream" if stream else "plain "
        for label, m in (("backend answer", backend), ("HTTP via proxy", http)):
            ratio = m["policy"] / m["scripted"]
            print(
                f"{kind} {label:<15} scripted {m['scripted'] * 1e3:7.3f} ms   "
                f"policy {m['policy'] * 1e3:7.3f} ms   ratio {ratio:5.3f}"
            )


if __name__ == "__main__":
    main()
