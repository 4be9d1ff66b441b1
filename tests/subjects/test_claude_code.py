"""Claude Code, unmodified (the pinned native binary), as a `command:` subject on one swe-lite task.

Its only tools are the benchmark's, over MCP (`--tools ""` removes every built-in tool,
`--strict-mcp-config` every MCP server but the attempt's own, whose URL Claude Code expands from
`${AFB_MCP_URL}` in the config). Its model is a scripted Anthropic Messages cassette served by
the attempt's model proxy at ANTHROPIC_BASE_URL (dummy key; non-essential traffic off). One draft
run: baseline plus the eight faults of specs/swe-lite-agents.toml (on the submit, the sandbox and
the model calls). What Claude Code did is read from the harness's evidence (the trigger engine's
per-tool counts, subject exits, the destination's own ledger, the grade), never from Claude Code.
With a scripted model only Claude Code's own machinery is measured (its API client's retries, its
MCP client, its relaunch behaviour): what "the model" does after a failed tool call is the script.

Installed by scripts/setup-claude-code.sh (run by scripts/setup.sh): required, not optional.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.subjects.agents import (
    attempts_by_fault,
    check_attempt,
    check_witnessed,
    fault_blocks,
    fix_turns,
    make_spec,
    run_draft,
    scripted_tables,
    write_cassette,
)

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

VERSION = "2.1.328"
CLAUDE = Path("/var/lib/afb/claude-code") / VERSION / "bin" / "claude"
SERVER = "afb"  # the MCP server's name in Claude Code's config: tools are mcp__afb__<tool>
MCP_CONFIG = {"mcpServers": {SERVER: {"type": "http", "url": "${AFB_MCP_URL}"}}}
FLAGS = [
    "-p",  # print mode: one non-interactive run, the prompt from stdin (the task file)
    "--bare",  # no hooks, plugins, CLAUDE.md discovery, background prefetches, keychain
    "--tools", "",  # no built-in tool at all (no Bash, Read, Edit, WebFetch, ...)
    "--strict-mcp-config", "--mcp-config", json.dumps(MCP_CONFIG),
    "--allowedTools", f"mcp__{SERVER}",  # every tool of that server, without a prompt
    "--model", "afb-scripted",
    "--no-session-persistence",
    "--output-format", "json",
]  # fmt: skip
ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}

FAULTS = fault_blocks()  # the eight faults of specs/swe-lite-agents.toml


def cassette_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The scripted fix (Claude Code asks the model once more after every tool result)."""

    def call(n: int, tool: str, **arguments: Any) -> list[dict[str, Any]]:
        return [{"id": f"toolu_afb_{n}", "name": f"mcp__{SERVER}__{tool}", "arguments": arguments}]

    return fix_turns(task, call)


def subject(spec_dir: Path) -> str:
    """The `[[subjects]]` block, with its cassette written into the spec's folder."""
    folder = write_cassette(spec_dir, "claude-code", cassette_turns)
    # the task goes in as the prompt (stdin); Claude Code expands ${AFB_MCP_URL} itself
    argv = ["/bin/sh", "-c", 'exec "$0" "$@" < "$AFB_TASK_FILE"', str(CLAUDE), *FLAGS]
    return f"""
[[subjects]]
id = "claude-code"
agent = "command:claude-code"

[subjects.config]
argv = {json.dumps(argv)}
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in ENV.items())} }}
mcp = true
{scripted_tables("claude-code", folder)}"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CLAUDE.is_file(), f"{CLAUDE} is missing: run scripts/setup-claude-code.sh (as root)"
    tmp = tmp_path_factory.mktemp("claude-code")
    spec = make_spec(tmp, subject(tmp / "spec"), FAULTS)  # make_spec's folder: tmp/spec
    proc, run_dir = run_draft(spec, tmp / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    return run_dir


BASELINE = {"model": 6, "exec": 4, "submit_patch": 1}
# fault -> (per-tool calls, (restart index, signaled) per launch, effects in the ledger, completed)
EXPECTED: dict[str, tuple[dict[str, int], list[tuple[int, bool]], int, bool]] = {
    # six model turns (one per scripted turn: Claude Code makes no side calls), four sandbox
    # commands over MCP, one submit
    "none": (BASELINE, [(0, False)], 1, True),
    # Relaunched, `claude -p` starts a new session from the first turn (nothing in its state
    # says the submit happened): every call again, and the effect lands twice.
    "sigkill-after-submit-effect": (
        {"model": 11, "exec": 8, "submit_patch": 2},
        [(0, True), (1, False)],
        2,
        True,
    ),
    # Its MCP client does not send the call again (the tool result is an ECONNRESET error); the
    # scripted model's next turn ends the run: one effect, committed although never confirmed.
    "lost-submit-response": (BASELINE, [(0, False)], 1, True),
    # The held submit is cut before it is forwarded and, again, not retried: no effect at all.
    "partition-during-submit": (BASELINE, [(0, False)], 0, False),
    # The stale-session error is the first command's result; the script goes on.
    "restart-during-first-exec": (BASELINE, [(0, False)], 1, True),
    # Stopped 5 s with the submit committed and its answer held: the same process continues
    # and gets the answer; nothing is repeated.
    "freeze-after-submit-effect": (BASELINE, [(0, False)], 1, True),
    # Claude Code's API client retries a model call that got no answer (up to 10 times).
    "lost-model-response": ({**BASELINE, "model": 7}, [(0, False)], 1, True),
    "partition-during-model-call": ({**BASELINE, "model": 7}, [(0, False)], 1, True),
    # Killed while its fourth model call is answered: started over (4 + 6 model calls).
    "sigkill-mid-model-call": (
        {"model": 10, "exec": 7, "submit_patch": 1},
        [(0, True), (1, False)],
        1,
        True,
    ),
}


def test_every_fault_is_witnessed(run: Path) -> None:
    by_fault = attempts_by_fault(run)
    assert set(by_fault) == set(EXPECTED)
    for fault, rs in by_fault.items():
        check_witnessed(rs, fault, fault)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_what_claude_code_did(run: Path, fault: str) -> None:
    check_attempt(run, attempts_by_fault(run)[fault], *EXPECTED[fault])
