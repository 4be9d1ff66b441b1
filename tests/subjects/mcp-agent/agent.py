"""A minimal agent that speaks only MCP (the official SDK's client): lists the tools, runs one
command in the sandbox, submits once, and lists the effects. Runs in its own uv environment.

With `--retry-submit` a submit that fails (an error result, or no answer at all: a partition, a
lost response) is retried on a fresh MCP session, up to 10 times, a second apart; each try is
logged to the state dir (`tries.jsonl`), so a test can see what the agent went through.

With `--model-call` it first asks its model one question (Chat Completions at OPENAI_BASE_URL,
stdlib HTTP) and puts the answer's text into the submit's payload (`model_answer`), so a test
reads what the model proxy delivered from the destination's own ledger."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.request

from mcp import Client

URL = os.environ["AFB_MCP_URL"]
STATE = os.environ["AFB_STATE_DIR"]


def log(**fields: object) -> None:
    with open(os.path.join(STATE, "tries.jsonl"), "a") as fh:
        fh.write(json.dumps({"t": time.time_ns(), **fields}) + "\n")


async def submit(payload: dict, retry: bool) -> tuple[bool, int]:
    """(the submit's is_error, tries); with `retry`, transport failures are tried again."""
    for n in range(1, 11 if retry else 2):
        try:
            async with Client(URL, read_timeout_seconds=10) as client:
                sub = await asyncio.wait_for(
                    client.call_tool("submit_patch", {"payload": payload}), 15
                )
            log(
                try_=n,
                ok=not sub.is_error,
                content=[c.model_dump(mode="json") for c in sub.content],
            )
            if not sub.is_error or not retry:
                return sub.is_error, n
            await asyncio.sleep(1)  # the tool said the submit did not go through: try again
            continue
        except BaseException as exc:  # the SDK raises exception groups, timeouts, ...
            if isinstance(exc, KeyboardInterrupt | SystemExit) or not retry:
                raise
            log(try_=n, error=f"{type(exc).__name__}: {exc}"[:300])
            await asyncio.sleep(1)
    return True, 10


def ask_model() -> str:
    body = {"model": "afb-test", "messages": [{"role": "user", "content": "Which tool first?"}]}
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return str(json.loads(resp.read())["choices"][0]["message"]["content"])


async def main(retry: bool, model: bool) -> int:
    answer = ask_model() if model else None
    async with Client(URL) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        ran = await client.call_tool("exec", {"argv": ["sh", "-c", "echo hello-from-mcp"]})
    payload: dict = {"patch": "", "tools": tools}
    if answer is not None:
        payload["model_answer"] = answer
    sub_error, tries = await submit(payload, retry)
    async with Client(URL) as client:
        listed = await client.call_tool("list_effects", {})
    report = {
        "tools": tools,
        "exec": [c.model_dump(mode="json") for c in ran.content],
        "submit_error": sub_error,
        "submit_tries": tries,
        "listed_error": listed.is_error,
    }
    with open(os.path.join(STATE, "report.json"), "w") as fh:
        json.dump(report, fh)
    print(json.dumps(report))
    return 0 if not sub_error else 1


if __name__ == "__main__":
    flags = sys.argv[1:]
    raise SystemExit(asyncio.run(main("--retry-submit" in flags, "--model-call" in flags)))
