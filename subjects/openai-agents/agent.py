"""An OpenAI Agents SDK agent as an agent-fault-bench subject (`command:`; docs/SUBJECTS.md).

One `agents.Agent` whose model is the Responses API at OPENAI_BASE_URL (the attempt's model
proxy, dummy key) and whose only tools are the attempt's MCP server over Streamable HTTP
(AFB_MCP_URL): read_file, write_file, exec, run_tests, submit_patch (irreversible) and, where the
spec declares it, submission_status. Tracing is off (nothing is exported anywhere).

The SDK is used as a developer would: what this file sets is the model, the MCP server, the
session and the few options below, each from the command line (so they are the subject's config
and enter subject_config_hash):

  --mcp-max-retry-attempts N   the SDK's own blind retry of a failed MCP call (0: none)
  --mcp-timeout S              the MCP client's HTTP and session read timeouts (the SDK's default
                               of 5 s would fail a long test run in the sandbox)
  --max-turns N                the Runner's turn limit (the SDK's default is 10)

The conversation is persisted in the state directory (the SDK's SQLiteSession in
$AFB_STATE_DIR/session.sqlite3), so a relaunch after SIGKILL resumes it: the same session with
no new input. The SDK writes the task's prompt before its first model call and each turn's items
(the model's answer and the tool results) once the whole turn is done; a turn that was in flight
at the kill (a model call, or a tool call the model had asked for) left nothing, so the resumed
run asks the model that turn again. What it answers then is the model's affair (a scripted
cassette, served by turn, answers the same again: an interrupted submit is asked for again).

What the agent saw is appended to $AFB_EVENT_LOG (launch, resume, the run's end): the agent's
own account, never evidence.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # before the SDK is imported

from agents import (
    Agent,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SQLiteSession,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

INSTRUCTIONS = (
    "You are a software engineer fixing a bug in a Python project. You work only through the "
    "tools you are given: they act on a sandbox that holds the project's sources. Find the "
    "cause, fix it, check the fix with the tests, then submit the fix once as a unified diff "
    "(-p1, relative to the project root) with the submit tool. Submitting is irreversible."
)


def log(**fields: Any) -> None:
    path = os.environ.get("AFB_EVENT_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"t": time.time_ns(), **fields}, sort_keys=True) + "\n")


def prompt(task: dict[str, Any]) -> str:
    """The task as the agent is told it: only the agent view's keys (never a known answer)."""
    statement = task.get("problem_statement")
    lines = (
        [statement.strip()]
        if isinstance(statement, str) and statement.strip()
        else [f"Task {task.get('task_id')}: make the project's failing tests pass."]
    )
    if task.get("src"):
        lines.append(f"The project's sources are at {task['src']} in the sandbox.")
    if task.get("submit"):
        lines.append(f"How to submit: {json.dumps(task['submit'], sort_keys=True)}")
    return "\n\n".join(lines)


async def run(args: argparse.Namespace) -> int:
    set_tracing_disabled(True)
    with open(os.environ["AFB_TASK_FILE"]) as fh:
        task = json.load(fh)
    state = os.environ["AFB_STATE_DIR"]
    session = SQLiteSession(
        f"afb-{task.get('task_id', 'task')}", os.path.join(state, "session.sqlite3")
    )
    history = await session.get_items()
    restart = int(os.environ.get("AFB_RESTART_INDEX", "0"))
    # resume: the session already holds the prompt (and every finished turn); no new input
    new_input: str | list[Any] = [] if history else prompt(task)
    log(event="launch", restart_index=restart, resumed_items=len(history))

    client = AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
    )
    model = OpenAIResponsesModel(model=args.model, openai_client=client)
    mcp = MCPServerStreamableHttp(
        params={"url": os.environ["AFB_MCP_URL"], "timeout": args.mcp_timeout,
                "sse_read_timeout": args.mcp_timeout},
        name="afb",
        cache_tools_list=True,
        client_session_timeout_seconds=args.mcp_timeout,
        max_retry_attempts=args.mcp_max_retry_attempts,
    )  # fmt: skip
    async with mcp:
        agent = Agent(name="afb-agent", instructions=INSTRUCTIONS, model=model, mcp_servers=[mcp])
        result = await Runner.run(
            agent,
            new_input,
            session=session,
            max_turns=args.max_turns,
            run_config=RunConfig(tracing_disabled=True),
        )
    log(event="finished", restart_index=restart, final_output=str(result.final_output)[:2000])
    print(result.final_output)
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="afb-openai-agents")
    p.add_argument("--model", default="afb-scripted")
    p.add_argument("--mcp-max-retry-attempts", type=int, required=True)
    p.add_argument("--mcp-timeout", type=float, default=600.0)
    p.add_argument("--max-turns", type=int, default=30)
    args = p.parse_args(argv)
    try:
        return asyncio.run(run(args))
    except Exception as exc:  # the run failed: say so in the event log, exit non-zero
        log(event="failed", error=f"{type(exc).__name__}: {exc}"[:2000])
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
