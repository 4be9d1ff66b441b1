"""The three wire dialects the model proxy speaks: which path is which, how many assistant
turns a request's conversation holds, and a scripted turn rendered as each dialect's JSON body
or SSE stream (with the event framing the official SDKs parse).

Rendering is deterministic (ids derive from the turn number, `created` is 0, token counts are
estimated from byte lengths unless the turn states them), so a relaunched agent that replays
the same conversation gets byte-identical answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from runner.evaluator.core.canonical import fast_canonical_bytes
from runner.runtime.cassettes.format import Dialect, ScriptedTurn

PATHS: Mapping[str, Dialect] = {
    "/v1/chat/completions": "openai-chat",
    "/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/responses": "openai-responses",
    "/v1/messages": "anthropic-messages",
}
PROVIDER: Mapping[Dialect, str] = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic-messages": "anthropic",
}
UPSTREAM_SUFFIX: Mapping[Dialect, str] = {  # appended to the provider's base URL
    "openai-chat": "/chat/completions",
    "openai-responses": "/responses",
    "anthropic-messages": "/v1/messages",
}
SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"
_RESP_ID = re.compile(r"^resp_afb_t(\d+)$")


def dialect_of(path: str) -> Dialect | None:
    return PATHS.get(path.split("?", 1)[0].rstrip("/") or "/")


def assistant_turns(dialect: Dialect, body: Mapping[str, Any]) -> int:
    """How many assistant turns the request's conversation already holds (= the turn to answer).

    Chat Completions and Messages: assistant messages. Responses: runs of assistant-produced
    input items (messages with role assistant, function calls, reasoning), plus the turns
    behind a `previous_response_id` this proxy issued (`resp_afb_t<N>`: N + 1 turns).
    """
    if dialect != "openai-responses":
        msgs = body.get("messages")
        if not isinstance(msgs, list):
            return 0
        return sum(1 for m in msgs if isinstance(m, dict) and m.get("role") == "assistant")
    turns = 0
    prev = body.get("previous_response_id")
    if isinstance(prev, str) and (m := _RESP_ID.match(prev)):
        turns = int(m.group(1)) + 1
    items = body.get("input")
    if not isinstance(items, list):
        return turns
    in_run = False
    for item in items:
        mine = isinstance(item, dict) and (
            item.get("role") == "assistant"
            or item.get("type") in ("function_call", "reasoning", "custom_tool_call")
        )
        if mine and not in_run:
            turns += 1
        in_run = mine
    return turns


def _j(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _usage(turn: ScriptedTurn, request: Mapping[str, Any]) -> tuple[int, int]:
    inp = turn.input_tokens
    if inp is None:
        inp = max(1, len(fast_canonical_bytes(dict(request))) // 4)
    out = turn.output_tokens
    if out is None:
        args = sum(len(_j(c.arguments)) for c in turn.tool_calls)
        out = max(1, (len(turn.text.encode()) + args) // 4)
    return inp, out


def render(
    dialect: Dialect, turn_no: int, turn: ScriptedTurn, request: Mapping[str, Any], model: str
) -> tuple[str, bytes]:
    """(content type, body) of `turn` answering `request` in `dialect`."""
    stream = request.get("stream") is True
    m = request.get("model")
    model = m if isinstance(m, str) and m else model
    usage = _usage(turn, request)
    if dialect == "openai-chat":
        if stream:
            opts = request.get("stream_options")
            with_usage = isinstance(opts, dict) and opts.get("include_usage") is True
            return SSE, _sse(_chat_chunks(turn_no, turn, model, usage, with_usage), named=False)
        return JSON, _j(_chat(turn_no, turn, model, usage)).encode()
    if dialect == "openai-responses":
        if stream:
            return SSE, _sse(_responses_events(turn_no, turn, model, usage), named=True)
        return JSON, _j(_response(turn_no, turn, model, usage, "completed")).encode()
    if stream:
        return SSE, _sse(_messages_events(turn_no, turn, model, usage), named=True)
    return JSON, _j(_message(turn_no, turn, model, usage)).encode()


def _sse(events: Iterator[dict[str, Any] | str], *, named: bool) -> bytes:
    out: list[str] = []
    for ev in events:
        if isinstance(ev, str):
            out.append(f"data: {ev}\n\n")
        elif named:
            out.append(f"event: {ev['type']}\ndata: {_j(ev)}\n\n")
        else:
            out.append(f"data: {_j(ev)}\n\n")
    return "".join(out).encode()


# --- OpenAI Chat Completions ---------------------------------------------------------------------


def _chat(n: int, t: ScriptedTurn, model: str, usage: tuple[int, int]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": t.text or None, "refusal": None}
    if t.tool_calls:
        msg["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _j(c.arguments)},
            }
            for c in t.tool_calls
        ]
    return {
        "id": f"chatcmpl-afb-t{n}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": "tool_calls" if t.tool_calls else "stop",
            }
        ],
        "usage": _chat_usage(usage),
    }


def _chat_usage(usage: tuple[int, int]) -> dict[str, int]:
    return {
        "prompt_tokens": usage[0],
        "completion_tokens": usage[1],
        "total_tokens": usage[0] + usage[1],
    }


def _chat_chunks(
    n: int, t: ScriptedTurn, model: str, usage: tuple[int, int], with_usage: bool
) -> Iterator[dict[str, Any] | str]:
    head = {"id": f"chatcmpl-afb-t{n}", "object": "chat.completion.chunk", "created": 0}
    head["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice]}

    yield chunk({"role": "assistant", "content": ""})
    if t.text:
        yield chunk({"content": t.text})
    for i, c in enumerate(t.tool_calls):
        fn = {"name": c.name, "arguments": ""}
        yield chunk({"tool_calls": [{"index": i, "id": c.id, "type": "function", "function": fn}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": _j(c.arguments)}}]})
    yield chunk({}, "tool_calls" if t.tool_calls else "stop")
    if with_usage:
        yield {**head, "choices": [], "usage": _chat_usage(usage)}
    yield "[DONE]"


# --- OpenAI Responses ----------------------------------------------------------------------------


def _output_items(n: int, t: ScriptedTurn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if t.text:
        part = {"type": "output_text", "text": t.text, "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_afb_t{n}",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for i, c in enumerate(t.tool_calls):
        call = {
            "type": "function_call",
            "id": f"fc_afb_t{n}_{i}",
            "call_id": c.id,
            "name": c.name,
            "arguments": _j(c.arguments),
            "status": "completed",
        }
        if c.namespace is not None:  # a namespaced tool (Codex CLI's MCP tools)
            call["namespace"] = c.namespace
        items.append(call)
    return items


def _response(
    n: int, t: ScriptedTurn, model: str, usage: tuple[int, int], status: str
) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": f"resp_afb_t{n}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": model,
        "output": _output_items(n, t) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage[0] + usage[1],
        }
        if done
        else None,
    }


def _responses_events(
    n: int, t: ScriptedTurn, model: str, usage: tuple[int, int]
) -> Iterator[dict[str, Any] | str]:
    seq = 0

    def ev(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal seq
        seq += 1
        return {"type": kind, "sequence_number": seq - 1, **fields}

    yield ev("response.created", response=_response(n, t, model, usage, "in_progress"))
    yield ev("response.in_progress", response=_response(n, t, model, usage, "in_progress"))
    for idx, item in enumerate(_output_items(n, t)):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            empty = {**item, "status": "in_progress", "content": []}
            yield ev("response.output_item.added", output_index=idx, item=empty)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            loc = {"item_id": item["id"], "output_index": idx, "content_index": 0}
            yield ev("response.content_part.added", **loc, part=part)
            yield ev("response.output_text.delta", **loc, delta=text, logprobs=[])
            yield ev("response.output_text.done", **loc, text=text, logprobs=[])
            yield ev("response.content_part.done", **loc, part=item["content"][0])
        else:
            empty = {**item, "status": "in_progress", "arguments": ""}
            yield ev("response.output_item.added", output_index=idx, item=empty)
            loc = {"item_id": item["id"], "output_index": idx}
            yield ev("response.function_call_arguments.delta", **loc, delta=item["arguments"])
            yield ev("response.function_call_arguments.done", **loc, arguments=item["arguments"])
        yield ev("response.output_item.done", output_index=idx, item=item)
    yield ev("response.completed", response=_response(n, t, model, usage, "completed"))


# --- Anthropic Messages --------------------------------------------------------------------------


def _blocks(t: ScriptedTurn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if t.text:
        out.append({"type": "text", "text": t.text})
    for c in t.tool_calls:
        out.append({"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)})
    return out


def _message(n: int, t: ScriptedTurn, model: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": f"msg_afb_t{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(t),
        "stop_reason": "tool_use" if t.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def _messages_events(
    n: int, t: ScriptedTurn, model: str, usage: tuple[int, int]
) -> Iterator[dict[str, Any] | str]:
    start = {**_message(n, t, model, usage), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": usage[0], "output_tokens": 1}
    yield {"type": "message_start", "message": start}
    for i, block in enumerate(_blocks(t)):
        if block["type"] == "text":
            yield {
                "type": "content_block_start",
                "index": i,
                "content_block": {**block, "text": ""},
            }
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            first = {**block, "input": {}}
            yield {"type": "content_block_start", "index": i, "content_block": first}
            delta = {"type": "input_json_delta", "partial_json": _j(block["input"])}
        yield {"type": "content_block_delta", "index": i, "delta": delta}
        yield {"type": "content_block_stop", "index": i}
    stop = "tool_use" if t.tool_calls else "end_turn"
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": usage[1]},
    }
    yield {"type": "message_stop"}
