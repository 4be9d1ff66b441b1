"""A policy-model answer vs a scripted one (not a test; target: policy <= 1.1x scripted).

    .venv/bin/python tests/perf/bench_policy.py [-n 300] [--runs 5]

The same conversation (mini-swe-agent-like, Chat Completions: a system prompt, 12 bash calls
with ~2 KB observations each, ~40 KB) answered two ways by the model proxy in `scripted` mode:

- scripted: a turn-numbered cassette (turn 12 of 14);
- policy:   the committed policy cassette of mini-swe-agent / careful for one task, whose rules
  are read over the conversation (every call's tool resolved by the command patterns, the last
  result classified, the status query looked for, the plan position derived).

Two figures per mode, streaming and not: the backend's answer alone (`BackendState.answer`, in
process: parse, key, select, render, ledger) and a full HTTP call through the proxy's front from
one keep-alive httpx client (what a subject sees). Prints medians and the ratio policy/scripted
per run with the load average before it, and with `--runs` > 1 the medians over the runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx

from runner.evaluator.core.inputs import project_root
from runner.runtime.cassettes.format import Cassette, ScriptedTurn, ToolCall
from runner.runtime.cassettes.load import load_cassette
from runner.runtime.interposers.modelproxy import ModelProxy
from runner.runtime.interposers.modelproxy.backend import BackendState

TASK = "cachetools-cached-info"
TARGET = 1.1  # issue 23: a policy answer costs at most 1.1x a scripted one
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


def once(cassettes: dict[str, Any], n: int) -> dict[str, dict[str, float]]:
    """One run: {line label: {mode: median seconds}} for the four lines."""
    hdr = {"content-type": "application/json", "authorization": "Bearer dummy"}
    out: dict[str, dict[str, float]] = {}
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
        out[f"{kind} backend answer"] = backend
        out[f"{kind} HTTP via proxy"] = http
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300, help="paired samples per line and run")
    ap.add_argument("--runs", type=int, default=1, help="runs; more than one adds the medians")
    a = ap.parse_args()
    cassettes = {"scripted": scripted(), "policy": load_cassette(POLICY)}
    kib = len(json.dumps(conversation(False))) / 1024
    print(f"conversation: {kib:.1f} KiB, n={a.n}, runs={a.runs}, target: policy <= {TARGET}x")
    runs: list[dict[str, dict[str, float]]] = []
    for r in range(a.runs):
        load = "/".join(f"{x:.2f}" for x in os.getloadavg())
        runs.append(once(cassettes, a.n))
        print(f"run {r + 1}, load average (1/5/15 min) {load} before it:")
        for label, m in runs[-1].items():
            ratio = m["policy"] / m["scripted"]
            print(
                f"  {label:<21} scripted {m['scripted'] * 1e3:7.3f} ms   "
                f"policy {m['policy'] * 1e3:7.3f} ms   ratio {ratio:5.3f}"
            )
    if a.runs > 1:
        print(f"median over {a.runs} runs (ratio: the median of the runs' ratios, its range):")
        for label in runs[0]:
            ms = {k: statistics.median(run[label][k] for run in runs) for k in runs[0][label]}
            ratios = [run[label]["policy"] / run[label]["scripted"] for run in runs]
            ratio = statistics.median(ratios)
            print(
                f"  {label:<21} scripted {ms['scripted'] * 1e3:7.3f} ms   "
                f"policy {ms['policy'] * 1e3:7.3f} ms   ratio {ratio:5.3f} "
                f"({min(ratios):.3f}-{max(ratios):.3f}) "
                f"{'met' if ratio <= TARGET else 'NOT met'}"
            )


if __name__ == "__main__":
    main()
