"""A tiny MCP-speaking subject process for the SIGKILL tests: N `exec` calls over MCP, each
answer logged as one JSON line on stdout (so the test sees where it got to)."""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import Client


async def main(url: str, n: int) -> None:
    async with Client(url, mode="legacy", read_timeout_seconds=60) as c:
        for i in range(n):
            r = await c.call_tool("exec", {"argv": ["echo", str(i)]})
            print(json.dumps({"i": i, "is_error": r.is_error}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
