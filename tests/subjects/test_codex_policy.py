"""Codex CLI 0.169.0 under the policy models (`careful`, `naive`) on one swe-lite task.

The subject is tests/subjects/test_codex.py's (the pinned binary, its wrapper, built-in tools
off, the benchmark's tools over MCP, a provider of its own at the model proxy, its retries off);
only its model differs: a policy cassette (runner/runtime/cassettes/policy.py) that reacts to
what Codex tells it. The cassette is the swe-lite `mcp-responses` one
(runner/benchmarks/swe_lite/cassettes.py `mcp_responses`: its plan, rules and `done`) with
two changes for Codex:

- every tool call carries `namespace = "mcp__afb"`: Codex declares the MCP server as one
  Responses namespace tool and runs a function call only when it names that namespace;
- `results.transport` also recognises Codex's own text for an MCP call that failed on the wire,
  "tool call error: tool call failed for `afb/<tool>` ... Transport send error ... error
  sending request for url": the swe-lite regexes (written for the Agents SDK's "An error
  occurred while running the tool") read it as `ok`, so without it neither policy would react
  (test_the_swe_lite_regexes_do_not_read_codexs_texts).

Codex tells its model one more thing no swe-lite regex names: after a kill and a resume, the
in-flight call's output is the bare word "aborted" (docs/SUBJECTS.md, *Resume contracts*). Two
readings are run side by side: `codex-<policy>` keeps the swe-lite rules as they are ("aborted"
is not an error: an `ok` result), `codex-<policy>-aborted` also counts "aborted" as a lost
answer (transport). Faults: the two of specs/swe-lite-agents.toml where the model's decision
matters (the submit committed, its answer lost or cut by a kill) plus baseline; 12 attempts.

What happened is read from the harness's evidence only: the trigger engine's per-tool counts
(incl. `submission_status`), subject exits, the destination's ledger, the grade, and the model
proxy's journal (what the submit's result said to the model, what the model asked next).

Needs the policy cassettes' reaction turns to keep a tool call's `namespace`: the fixture
checks it first and fails naming the runtime change (`_suffixed` in policy.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.swe_lite.cassettes import mcp_responses
from runner.benchmarks.swe_lite.grade import load_task
from runner.runtime.cassettes.policy import POLICIES, Policy, Result, parse_policy
from runner.runtime.subjects.tree import tree_digest
from tests.subjects.agents import (
    ROOT,
    TASK,
    attempts,
    check_attempt,
    check_witnessed,
    fault_blocks,
    make_spec,
    one,
    run_draft,
)
from tests.subjects.test_codex import CODEX, FLAGS, SERVER, WRAPPER

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

NAMESPACE = f"mcp__{SERVER}"
FAULT_IDS = ("lost-submit-response", "sigkill-after-submit-effect")
FAULTS = fault_blocks(*FAULT_IDS)
# Codex's text for an MCP call that failed in transport (its MCP client does not retry it)
CODEX_FAILED = f"tool call failed for `{SERVER}/"
ABORTED = "^aborted$"  # Codex's synthetic output for a call in flight when it was killed
SUBJECTS = {f"codex-{p}{v}": (p, v == "-aborted") for p in POLICIES for v in ("", "-aborted")}


def _namespaced(turn: dict[str, Any]) -> dict[str, Any]:
    calls = [{**c, "namespace": NAMESPACE} for c in turn.get("tool_calls", [])]
    return {**turn, "tool_calls": calls} if calls else turn


def codex_cassette(policy: str, aborted: bool) -> dict[str, Any]:
    """The swe-lite mcp-responses policy cassette of TASK, its tool calls namespaced, Codex's
    failure text (and with `aborted` its "aborted") read as a transport failure."""
    doc = mcp_responses(load_task(ROOT / "specs" / "swe-lite" / TASK), policy)
    doc["plan"] = [_namespaced(t) for t in doc["plan"]]
    doc["rules"] = [{**r, "answer": _namespaced(r["answer"])} for r in doc["rules"]]
    doc["done"] = _namespaced(doc["done"])
    extra = [CODEX_FAILED, ABORTED] if aborted else [CODEX_FAILED]
    transport = "|".join([doc["results"]["transport"], *extra])
    doc["results"] = {**doc["results"], "transport": transport}
    return doc


def reactions_keep_the_namespace() -> bool:
    """Whether a rule's answer (a policy model's reaction: the status query, the re-submit) is
    served with its tool calls' `namespace`, as plan steps are."""
    policy = Policy(parse_policy(codex_cassette("careful", False), "codex-careful"))
    cid = "call_" + TASK[:24]
    lost = "tool call failed for `afb/submit_patch`: error sending request"
    body = {"input": [
        {"type": "function_call", "call_id": f"{cid}_6", "name": "submit_patch",
         "namespace": NAMESPACE, "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"{cid}_6", "output": lost},
    ]}  # fmt: skip
    sel = policy.select("openai-responses", body)
    assert sel.source == "rule:careful-ask-status-after-failed-submit", sel.source
    assert sel.answer is not None
    return all(c.namespace == NAMESPACE for c in sel.answer.tool_calls)


def subject(spec_dir: Path, sid: str, policy: str, aborted: bool) -> str:
    folder = spec_dir / sid / "cassettes"
    folder.mkdir(parents=True)
    doc = codex_cassette(policy, aborted)
    (folder / f"{TASK}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    argv = ["/bin/sh", "-c", WRAPPER.read_text(), "codex-subject", str(CODEX), *FLAGS]
    return f"""
[[subjects]]
id = "{sid}"
agent = "command:codex"

[subjects.config]
argv = {json.dumps(argv)}
mcp = true

[subjects.config.model]
mode = "scripted"
cassettes = "{sid}/cassettes"
digest = "{tree_digest(folder)}"
policy = "{policy}"

[subjects.config.limits]
max_relaunches = 3
timeout_s = 300.0
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CODEX.is_file(), f"{CODEX} is missing: run scripts/setup-codex.sh (as root)"
    assert reactions_keep_the_namespace(), (
        "a policy rule's answer loses its tool calls' `namespace`: runner/runtime/cassettes/"
        "policy.py `_suffixed` rebuilds each ToolCall from (id, name, arguments) only, so the "
        "status query and the re-submit reach Codex without `namespace` and it does not run "
        "them (docs/SUBJECTS.md: such a call gets `unsupported call: ...`); it must pass "
        "`namespace=c.namespace` too"
    )
    tmp = tmp_path_factory.mktemp("codex-policy")
    blocks = "".join(subject(tmp / "spec", s, p, a) for s, (p, a) in SUBJECTS.items())
    spec = make_spec(tmp, blocks, FAULTS)  # make_spec's folder: tmp/spec
    proc, run_dir = run_draft(spec, tmp / "out")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # draft: no score
    return run_dir


def by_cell(run_dir: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rs in attempts(run_dir):
        started = one(rs, "attempt_started")
        key = (started["subject_id"], started["fault_id"])
        assert key not in out  # one attempt per cell
        out[key] = rs
    return out


SUBMIT = f"call_{TASK[:24]}_6"  # the plan's submit (mcp_responses: step 6)
PLAN = {"model": 8, "exec": 3, "read_file": 1, "write_file": 1, "run_tests": 1, "submit_patch": 1}


def calls(model: int = 8, submits: int = 1, status: int = 0) -> dict[str, int]:
    out = {**PLAN, "model": model, "submit_patch": submits}
    return {**out, "submission_status": status} if status else out


# (subject, fault) -> (per-tool calls, (restart index, signaled) per launch, effects in the
# ledger, completed, what the submit's result told the model, what the model asked for next)
Expected = tuple[dict[str, int], list[tuple[int, bool]], int, bool, str, list[str]]
ONCE, KILLED = [(0, False)], [(0, True), (1, False)]
EXPECTED: dict[tuple[str, str], Expected] = {}
for sid in SUBJECTS:
    # Baseline: seven plan turns (look, copy, read, write the patch, apply, test, submit) and
    # the `done` answer; the submit's result says committed, no rule fires under any policy.
    EXPECTED[sid, "none"] = (calls(), ONCE, 1, True, "committed", [])
for sid in ("codex-careful", "codex-careful-aborted"):
    # Codex told the model "tool call failed for `afb/submit_patch`" (the call committed, its
    # answer was lost; Codex's MCP client does not send it again). `careful` reads a transport
    # failure and asks submission_status; it says committed; the model stops: one effect.
    EXPECTED[sid, "lost-submit-response"] = (
        calls(9, status=1),
        ONCE,
        1,
        True,
        "failed",
        ["submission_status"],
    )
for sid in ("codex-naive", "codex-naive-aborted"):
    # Told the same "failed", `naive` re-submits at once: the destination commits it again,
    # two effects (the duplicate is the model's; the second answer is ok, then `done`).
    EXPECTED[sid, "lost-submit-response"] = (
        calls(9, submits=2),
        ONCE,
        2,
        True,
        "failed",
        ["submit_patch"],
    )
for sid in ("codex-careful", "codex-naive"):
    # Killed after the submit committed; relaunched, the wrapper resumes Codex's session and
    # Codex gives the model the submit's call with the output "aborted". The swe-lite rules
    # do not read "aborted" as an error: an `ok` result, no rule fires, the plan is done and
    # the model says so (7 model calls before the kill, 1 after): one effect under either
    # policy, for the wrong reason: the model took "aborted" for success and never checked.
    EXPECTED[sid, "sigkill-after-submit-effect"] = (calls(), KILLED, 1, True, "aborted", [])
# "aborted" read as a lost answer: `careful` asks, hears committed and stops (one effect);
# `naive` re-submits and duplicates (two effects).
EXPECTED["codex-careful-aborted", "sigkill-after-submit-effect"] = (
    calls(9, status=1),
    KILLED,
    1,
    True,
    "aborted",
    ["submission_status"],
)
EXPECTED["codex-naive-aborted", "sigkill-after-submit-effect"] = (
    calls(9, submits=2),
    KILLED,
    2,
    True,
    "aborted",
    ["submit_patch"],
)


def told(rs: list[dict[str, Any]]) -> str | None:
    """What the plan's submit's result, as Codex sent it to the model, said."""
    for r in rs:
        for seen in r.get("results", []) if r["type"] == "model_exchange" else []:
            if seen["call_id"] == SUBMIT:
                text = seen["excerpt"]
                if '"committed":true' in text.replace(" ", ""):
                    return "committed"
                if text == "aborted":
                    return "aborted"
                assert CODEX_FAILED + "submit_patch`" in text, text
                return "failed"
    return None


def asked_after_submit(rs: list[dict[str, Any]]) -> list[str]:
    """The tools the model asked for after the plan's submit (its reaction), in order."""
    asked = [c for r in rs if r["type"] == "model_exchange" for c in r["asked"]]
    ids = [c["call_id"] for c in asked]
    return [c["name"] for c in asked[ids.index(SUBMIT) + 1 :]]


CELLS = sorted(EXPECTED)
# what Codex 0.169.0 sent the model for the submit under lost-submit-response (the proxy's journal)
LOST = (
    "Wall time: 0.0131 seconds\nOutput:\ntool call error: tool call failed for `afb/submit_patch`"
    "\n\nCaused by:\n    Transport send error: Transport [codex_rmcp_client::...] error: Client "
    "error: HTTP request failed: http/request failed: error sending request for url "
    "(http://198.18.0.9:39861/mcp)"
)


def test_the_swe_lite_regexes_do_not_read_codexs_texts() -> None:
    """Codex's failure text and its "aborted" are `ok` to the swe-lite mcp-responses regexes;
    this cassette reads the failure (and in the -aborted subjects "aborted") as transport."""
    task = load_task(ROOT / "specs" / "swe-lite" / TASK)
    swe_lite = Policy(parse_policy(mcp_responses(task, "careful"), "mcp-responses"))
    codex = Policy(parse_policy(codex_cassette("careful", False), "codex-careful"))
    codex_aborted = Policy(parse_policy(codex_cassette("careful", True), "codex-careful-ab"))
    said = [Result("c", LOST), Result("c", "aborted")]
    assert [swe_lite.classify(r) for r in said] == ["ok", "ok"]
    assert [codex.classify(r) for r in said] == ["transport", "ok"]
    assert [codex_aborted.classify(r) for r in said] == ["transport", "transport"]


def test_every_cell_ran_and_its_fault_was_witnessed(run: Path) -> None:
    cells = by_cell(run)
    assert set(cells) == set(EXPECTED)
    for (sid, fault), rs in cells.items():
        check_witnessed(rs, fault, (sid, fault))


@pytest.mark.parametrize(("sid", "fault"), CELLS)
def test_what_codex_and_its_policy_model_did(run: Path, sid: str, fault: str) -> None:
    calls_, launches, effects, completed, _, _ = EXPECTED[sid, fault]
    check_attempt(run, by_cell(run)[sid, fault], calls_, launches, effects, completed)


@pytest.mark.parametrize(("sid", "fault"), CELLS)
def test_what_codex_told_the_model_and_what_it_asked_next(run: Path, sid: str, fault: str) -> None:
    rs = by_cell(run)[sid, fault]
    *_, said, reaction = EXPECTED[sid, fault]
    assert (told(rs), asked_after_submit(rs)) == (said, reaction)
