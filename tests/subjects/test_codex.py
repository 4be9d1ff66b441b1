"""Codex CLI, unmodified (the pinned static binary), as a `command:` subject on one swe-lite task.

`codex exec` (non-interactive) whose only tools are the benchmark's, over MCP (every built-in
tool is turned off by config; the attempt's MCP server is the only one configured). Its model is
a scripted OpenAI Responses cassette served by the attempt's model proxy at OPENAI_BASE_URL
(a provider `afb` of its own, dummy key, its retries off). A relaunch resumes Codex's own session
(`codex exec resume --last`, CODEX_HOME in the state dir): tests/subjects/codex/codex-subject.sh.
One draft run: baseline plus the eight faults of specs/swe-lite-agents.toml (on the submit, the
sandbox and the model calls). What Codex did is read from the harness's evidence (the trigger
engine's per-tool counts, subject exits, the destination's own ledger, the grade), never from
Codex. With a scripted model only Codex's own machinery is measured (its model client, its MCP
client, its resume): what "the model" does after a failed tool call is the script.

Codex declares MCP tools as a Responses `namespace` tool (`mcp__afb`, functions `exec`, ...) and
runs a function call only when it names that namespace, so the cassette's calls carry
`namespace` (a ToolCall field of the Responses dialect).

Installed by scripts/setup-codex.sh: required, not optional.
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

VERSION = "0.169.0"
CODEX = Path("/var/lib/afb/codex") / VERSION / "bin" / "codex"
WRAPPER = Path(__file__).resolve().parent / "codex" / "codex-subject.sh"
SERVER = "afb"  # the MCP server's name in Codex's config: its tools are namespace mcp__afb
PROVIDER = {  # the model: a provider of its own at the proxy (base_url added by the wrapper)
    "model_provider": "afb",
    "model_providers.afb.name": "afb",
    "model_providers.afb.wire_api": "responses",
    "model_providers.afb.env_key": "OPENAI_API_KEY",  # the proxy's dummy key
    "model_providers.afb.supports_websockets": "false",  # plain POST /v1/responses (SSE)
    "model_providers.afb.request_max_retries": "0",  # its own retries off: the faults are
    "model_providers.afb.stream_max_retries": "0",  # the harness's, and a refusal ends it
    "mcp_servers.afb.tool_timeout_sec": "600",  # a test run may be long (url: the wrapper)
    "web_search": '"disabled"',
    "tools.experimental_request_user_input.enabled": "false",
    "analytics.enabled": "false",
    "check_for_update_on_startup": "false",
}
# built-in tools and discovery off: no shell (exec_command, write_stdin), no sub-agents, goals,
# view_image, apps, plugins or hooks; what is left is the MCP server's namespace and Codex's three
# MCP resource tools (list_mcp_resources, list_mcp_resource_templates, read_mcp_resource)
DISABLED = ["shell_tool", "unified_exec", "multi_agent", "goals", "view_image",
            "apps", "plugins", "hooks"]  # fmt: skip
FLAGS = [
    *(a for k, v in PROVIDER.items() for a in ("-c", f"{k}={v}")),
    *(a for f in DISABLED for a in ("--disable", f)),
    "-m", "afb-scripted",
    "--dangerously-bypass-approvals-and-sandbox",  # else `codex exec` cancels MCP tool calls
    "--skip-git-repo-check",  # the state dir is no git repository
    "--json",  # events as JSONL on stdout (the subject's log)
]  # fmt: skip

FAULTS = fault_blocks()  # the eight faults of specs/swe-lite-agents.toml


def cassette_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The scripted fix (Codex asks the model once more after every tool result)."""

    def call(n: int, tool: str, **arguments: Any) -> list[dict[str, Any]]:
        c = {"id": f"call_afb_{n}", "namespace": f"mcp__{SERVER}", "name": tool}
        return [{**c, "arguments": arguments}]

    return fix_turns(task, call)


def subject(spec_dir: Path) -> str:
    """The `[[subjects]]` block, with its cassette written into the spec's folder."""
    folder = write_cassette(spec_dir, "codex", cassette_turns)
    argv = ["/bin/sh", "-c", WRAPPER.read_text(), "codex-subject", str(CODEX), *FLAGS]
    return f"""
[[subjects]]
id = "codex"
agent = "command:codex"

[subjects.config]
argv = {json.dumps(argv)}
mcp = true
{scripted_tables("codex", folder)}"""


def namespaced_tool_calls() -> bool:
    """Whether this runtime's cassettes can say a Responses function call's `namespace`."""
    from runner.runtime.cassettes.format import ToolCall

    return "namespace" in ToolCall.model_fields


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CODEX.is_file(), f"{CODEX} is missing: run scripts/setup-codex.sh (as root)"
    assert namespaced_tool_calls(), (
        "the cassette format has no ToolCall.namespace: Codex runs a Responses function call "
        "only when it names its namespace (mcp__afb), so the proxy must render one"
    )
    tmp = tmp_path_factory.mktemp("codex")
    spec = make_spec(tmp, subject(tmp / "spec"), FAULTS)  # make_spec's folder: tmp/spec
    proc, run_dir = run_draft(spec, tmp / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    return run_dir


BASELINE = {"model": 6, "exec": 4, "submit_patch": 1}
# fault -> (per-tool calls, (restart index, signaled) per launch, effects in the ledger, completed,
# the last launch's exit code)
Expected = tuple[dict[str, int], list[tuple[int, bool]], int, bool, int]
EXPECTED: dict[str, Expected] = {
    # six model calls (one per scripted turn: Codex makes no side call, no title, compaction or
    # model-list request), four sandbox commands over MCP, one submit
    "none": (BASELINE, [(0, False)], 1, True, 0),
    # Relaunched, the wrapper resumes Codex's own session (`codex exec resume --last`). Its
    # rollout holds the submit's function call but not its result; Codex sends that call back
    # to the model with the output "aborted". Five assistant turns in the conversation: the
    # scripted model answers turn 5 ("done") and nothing is repeated: one effect, the model
    # told "aborted" about a submit that committed.
    "sigkill-after-submit-effect": (BASELINE, [(0, True), (1, False)], 1, True, 0),
    # Its MCP client does not send the call again; the tool result is "tool call failed for
    # `afb/submit_patch` ... error sending request"; the scripted model's next turn ends the
    # run: one effect, committed although Codex reported a failure.
    "lost-submit-response": (BASELINE, [(0, False)], 1, True, 0),
    # The held submit is cut before it is forwarded and, again, not retried: no effect at all.
    "partition-during-submit": (BASELINE, [(0, False)], 0, False, 0),
    # The stale-session error is the first command's result; the script goes on.
    "restart-during-first-exec": (BASELINE, [(0, False)], 1, True, 0),
    # Stopped 5 s with the submit committed and its answer held: the same process continues
    # and gets the answer; nothing is repeated.
    "freeze-after-submit-effect": (BASELINE, [(0, False)], 1, True, 0),
    # With its retries off (request_max_retries = stream_max_retries = 0) one model call without
    # an answer ends the run: `turn.failed` ("stream disconnected before completion"), exit 1,
    # nothing submitted. (With both at 1 it retries once and completes, 7 model calls.)
    "lost-model-response": ({"model": 3, "exec": 2}, [(0, False)], 0, False, 1),
    "partition-during-model-call": ({"model": 2, "exec": 1}, [(0, False)], 0, False, 1),
    # Killed while its fourth model call is answered: resumed, the session ends at the third
    # command's result (the answer was never recorded), so the fourth call is made again
    # (3 + 1 + 3 model calls) and no finished command runs twice.
    "sigkill-mid-model-call": (
        {"model": 7, "exec": 4, "submit_patch": 1},
        [(0, True), (1, False)],
        1,
        True,
        0,
    ),
}
GAVE_UP = {"lost-model-response", "partition-during-model-call"}  # exit 1: subject_gave_up

SUBMIT = "call_afb_4"  # the scripted submit's call id
# fault -> what the submit's result told the model (the proxy's journal of the next request),
# none when the run ended before
TOLD: dict[str, str | None] = {
    "none": "committed",
    "sigkill-after-submit-effect": "aborted",  # Codex's own text for a call cut by the kill
    "lost-submit-response": "failed",  # committed, reported as a transport error
    "partition-during-submit": "failed",
    "restart-during-first-exec": "committed",
    "freeze-after-submit-effect": "committed",
    "lost-model-response": None,
    "partition-during-model-call": None,
    "sigkill-mid-model-call": "committed",
}


def told(rs: list[dict[str, Any]]) -> str | None:
    """What the submit's result, as Codex sent it to the model, said."""
    for r in rs:
        for seen in r.get("results", []) if r["type"] == "model_exchange" else []:
            if seen["call_id"] == SUBMIT:
                text = seen["excerpt"]
                if '"committed":true' in text:
                    return "committed"
                if text == "aborted":
                    return "aborted"
                assert f"tool call failed for `{SERVER}/submit_patch`" in text, text
                return "failed"
    return None


def test_every_fault_is_witnessed(run: Path) -> None:
    by_fault = attempts_by_fault(run)
    assert set(by_fault) == set(EXPECTED)
    for fault, rs in by_fault.items():
        outcome = "subject_gave_up" if fault in GAVE_UP else "subject_finished"
        check_witnessed(rs, fault, fault, outcome)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_what_codex_did(run: Path, fault: str) -> None:
    check_attempt(run, attempts_by_fault(run)[fault], *EXPECTED[fault])


@pytest.mark.parametrize("fault", sorted(TOLD))
def test_what_codex_told_its_model(run: Path, fault: str) -> None:
    assert told(attempts_by_fault(run)[fault]) == TOLD[fault]
