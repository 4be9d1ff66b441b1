"""Dialect helpers: paths, the turn count that scripted mode answers by, event classification,
and the order a recorded cassette keeps when calls finish out of order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.runtime.cassettes.format import RecordedExchange, RecordedResponse, request_key
from runner.runtime.interposers.modelproxy import ProxyEvent
from runner.runtime.interposers.modelproxy import dialects as D
from runner.runtime.interposers.modelproxy.proxy import _in_occurrence_order, model_tool


def test_paths_and_the_tool_map() -> None:
    assert D.dialect_of("/v1/chat/completions") == "openai-chat"
    assert D.dialect_of("/v1/messages?beta=true") == "anthropic-messages"
    assert D.dialect_of("/v1/responses/") == "openai-responses"
    assert D.dialect_of("/v1/messages/count_tokens") is None
    assert model_tool("POST", "/v1/messages") == "model"
    assert model_tool("GET", "/v1/messages") is None
    assert model_tool("POST", "/effects") is None


def test_responses_turns_count_runs_of_assistant_items_and_previous_responses() -> None:
    user = {"role": "user", "content": "x"}
    call = {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "a", "output": "ok"}
    said = {"type": "message", "role": "assistant", "content": "y"}
    # one turn that made two calls is still one turn
    items = [user, said, call, call, out, out, call, out]
    assert D.assistant_turns("openai-responses", {"input": items}) == 2
    assert D.assistant_turns("openai-responses", {"input": "just text"}) == 0
    prev = {"previous_response_id": "resp_afb_t4", "input": [out]}
    assert D.assistant_turns("openai-responses", prev) == 5
    foreign = {"previous_response_id": "resp_abc", "input": [out]}
    assert D.assistant_turns("openai-responses", foreign) == 0


def test_a_namespaced_call_names_its_namespace_in_responses_only() -> None:
    """Codex CLI runs a Responses function call of an MCP tool only when it names the tool's
    namespace; a call without one renders, and dumps, as before."""
    import json

    from runner.runtime.cassettes.format import ScriptedTurn, ToolCall

    plain = {"id": "c0", "name": "exec"}
    turn = ScriptedTurn(tool_calls=(ToolCall(**plain, namespace="mcp__afb"), ToolCall(**plain)))
    body = json.loads(D.render("openai-responses", 0, turn, {}, "m")[1])
    named, bare = body["output"]
    assert (named["namespace"], named["name"]) == ("mcp__afb", "exec")
    assert "namespace" not in bare
    assert "namespace" not in ToolCall(**plain).model_dump(mode="json")
    _, stream = D.render("openai-responses", 0, turn, {"stream": True}, "m")
    assert stream.count(b'"namespace":"mcp__afb"') == 3  # item added, item done, completed
    chat = json.loads(D.render("openai-chat", 0, turn, {}, "m")[1])
    assert "namespace" not in json.dumps(chat)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["user", "assistant", "system", "tool"]), max_size=12))
def test_chat_and_messages_turns_are_the_assistant_messages(roles: list[str]) -> None:
    body: dict[str, Any] = {"messages": [{"role": r, "content": "."} for r in roles]}
    n = roles.count("assistant")
    assert D.assistant_turns("openai-chat", body) == n
    assert D.assistant_turns("anthropic-messages", body) == n


def test_harness_fault_classification() -> None:
    def ev(kind: str, status: int) -> ProxyEvent:
        return ProxyEvent(kind, "openai-chat", "c", "k", 1, 0, status, "m")  # type: ignore[arg-type]

    assert ev("divergence", 422).harness_fault
    assert ev("upstream_error", 502).harness_fault and ev("upstream_error", 429).harness_fault
    assert ev("upstream_error", 401).harness_fault
    assert not ev("upstream_error", 400).harness_fault  # the agent's malformed request
    assert ev("upstream_error", 400).to_dict()["harness_fault"] is False


@settings(max_examples=60, deadline=None)
@given(st.permutations([("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2)]))
def test_recorded_order_keeps_each_keys_occurrences_ascending(
    order: list[tuple[str, int]],
) -> None:
    keys = {n: request_key("openai-chat", {"n": n}) for n in "ab"}
    resp = RecordedResponse(status=200, content_type="application/json", body="{}")
    entries = [
        RecordedExchange(
            key=keys[n], occurrence=o, dialect="openai-chat", request={"n": n}, response=resp
        )
        for n, o in order
    ]
    got = _in_occurrence_order(entries)
    for k in keys.values():
        occ = [e.occurrence for e in got if e.key == k]
        assert occ == sorted(occ)
    assert [e.key for e in got] == [e.key for e in entries]  # chronology of keys is kept
