"""A minimal agent that speaks only MCP (the official SDK's client): lists the tools, runs one
command in the sandbox, submits once, and lists the effects. Runs in its own uv environment."""

from __future__ import annotations

import asyncio
import json
import os

from mcp import Client


async def main() -> int:
    async with Client(os.environ["AFB_MCP_URL"]) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        ran = await client.call_tool("exec", {"argv": ["sh", "-c", "echo hello-from-mcp"]})
        sub = await client.call_tool("submit_patch", {"payload": {"patch": "", "tools": tools}})
        listed = await client.call_tool("list_effects", {})
    report = {
        "tools": tools,
        "exec": [c.model_dump(mode="json") for c in ran.content],
        "submit_error": sub.is_error,
        "listed_error": listed.is_error,
    }
    with open(os.path.join(os.environ["AFB_STATE_DIR"], "report.json"), "w") as fh:
        json.dump(report, fh)
    print(json.dumps(report))
    return 0 if not sub.is_error else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
