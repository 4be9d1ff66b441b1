"""A minimal agent that speaks only MCP (the official SDK's client): lists the tools, runs one
command in the sandbox, submits once, and lists the effects. Runs in its own uv environment.

With `--retry-submit` a submit that fails (an error result, or no answer at all: a partition, a
lost response) is retried on a fresh MCP session, up to 10 times, a second apart; each try is
logged to the state dir (`tries.jsonl`), so a test can see what the agent went through."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

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


async def main(retry: bool) -> int:
    async with Client(URL) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        ran = await client.call_tool("exec", {"argv": ["sh", "-c", "echo hello-from-mcp"]})
    sub_error, tries = await submit({"patch": "", "tools": tools}, retry)
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
    raise SystemExit(asyncio.run(main("--retry-submit" in sys.argv[1:])))
