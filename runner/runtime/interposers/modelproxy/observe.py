"""What a model request told the model about earlier tool calls, and what its answer asked for.

The model proxy sees every conversation the framework sends: the tool results it carries are
what the framework *told* its model (issue 23: truthful or not is decided by the evaluator,
`runner/evaluator/publish/truthfulness.py`). Per request the observer journals one
`ModelExchange` record before the answer is sent, so every tool call the answer causes comes
after it in the attempt's journal:

- carried results, per dialect: openai-chat `role: tool` messages (`tool_call_id`),
  openai-responses `function_call_output` input items (`call_id`), anthropic `tool_result`
  blocks (`tool_use_id`, `is_error`); each by its id and the SHA-256 of its text, and the ones
  not seen before in the attempt with a bounded excerpt (whole up to `EXCERPT_CHARS`, else head
  and tail) -- a conversation repeats its history on every request, the journal does not;
- asked calls: the tool calls of the answer produced (JSON or SSE, as served).

Observation only: nothing here changes what is answered.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import runner.runtime.interposers.modelproxy.dialects as D
from runner.evaluator.evidence.records import (
    EXCERPT_CHARS,
    AskedCall,
    ModelExchange,
    ToolResultRef,
    ToolResultSeen,
)

Result = tuple[str, str, bool | None]  # (tool call id, text, is_error)


def _text(content: Any) -> str:
    """A tool result's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
        return "\n".join(parts)
    if content is None:
        return ""
    return json.dumps(content, sort_keys=True, ensure_ascii=False)


def tool_results(dialect: str, body: Mapping[str, Any]) -> list[Result]:
    """The tool results a request carries, in conversation order."""
    out: list[Result] = []
    if dialect == "openai-responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                cid = item.get("call_id")
                if isinstance(cid, str):
                    out.append((cid, _text(item.get("output")), None))
        return out
    msgs = body.get("messages")
    for m in msgs if isinstance(msgs, list) else ():
        if not isinstance(m, dict):
            continue
        if dialect == "openai-chat":
            if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
                out.append((m["tool_call_id"], _text(m.get("content")), None))
            continue
        blocks = m.get("content")
        for b in blocks if isinstance(blocks, list) else ():
            if isinstance(b, dict) and b.get("type") == "tool_result":
                cid = b.get("tool_use_id")
                if isinstance(cid, str):
                    err = b.get("is_error")
                    flag = err if isinstance(err, bool) else None
                    out.append((cid, _text(b.get("content")), flag))
    return out


def _sse_data(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        raw = line[5:].strip()
        if not raw or raw == "[DONE]":
            continue
        try:
            ev = json.loads(raw)
        except ValueError:
            continue
        if isinstance(ev, dict):
            yield ev


def _asked_json(dialect: str, doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if dialect == "openai-chat":
        for ch in doc.get("choices") or ():
            msg = ch.get("message") if isinstance(ch, dict) else None
            for c in (msg or {}).get("tool_calls") or ():
                fn = c.get("function") or {}
                out.append((str(c.get("id", "")), str(fn.get("name", ""))))
    elif dialect == "openai-responses":
        for item in doc.get("output") or ():
            if isinstance(item, dict) and item.get("type") == "function_call":
                out.append((str(item.get("call_id", "")), str(item.get("name", ""))))
    else:
        for b in doc.get("content") or ():
            if isinstance(b, dict) and b.get("type") == "tool_use":
                out.append((str(b.get("id", "")), str(b.get("name", ""))))
    return out


def _asked_sse(dialect: str, data: bytes) -> list[tuple[str, str]]:
    out: dict[str, str] = {}  # by id, in first-seen order
    for ev in _sse_data(data):
        if dialect == "openai-chat":
            for ch in ev.get("choices") or ():
                delta = ch.get("delta") if isinstance(ch, dict) else None
                for c in (delta or {}).get("tool_calls") or ():
                    if isinstance(c, dict) and c.get("id"):
                        out.setdefault(str(c["id"]), str((c.get("function") or {}).get("name", "")))
        elif dialect == "openai-responses":
            item = ev.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                out.setdefault(str(item.get("call_id", "")), str(item.get("name", "")))
        else:
            block = ev.get("content_block")
            if (
                ev.get("type") == "content_block_start"
                and isinstance(block, dict)
                and block.get("type") == "tool_use"
            ):
                out.setdefault(str(block.get("id", "")), str(block.get("name", "")))
    return list(out.items())


def asked_calls(dialect: str, content_type: str, data: bytes) -> list[tuple[str, str]]:
    """(id, name) of every tool call the served answer asks for; [] for an unreadable answer."""
    if content_type.startswith("text/event-stream"):
        return _asked_sse(dialect, data)
    try:
        doc = json.loads(data)
    except ValueError:
        return []
    return _asked_json(dialect, doc) if isinstance(doc, dict) else []


def excerpt(text: str) -> str:
    """Whole up to EXCERPT_CHARS; else the head and the tail (half each) and what was left out:
    a framework's verdict is often at either end (a status line first, an exception last)."""
    if len(text) <= EXCERPT_CHARS:
        return text
    half = EXCERPT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters elided ...]\n{text[-half:]}"


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ExchangeObserver:
    """Called by the model backend for every request it answered; journals one record.

    `append` is the attempt's journal append (fsync'd): the record is durable before the answer
    leaves. A record that cannot be written goes to `on_error` (the attempt journals a harness
    error: its evidence is incomplete), never to the subject. Thread-safe: concurrent model
    calls of one attempt share the seen-set."""

    def __init__(
        self,
        append: Callable[[Any], object],
        ref: Mapping[str, Any],
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._append = append
        self._ref = dict(ref)
        self._on_error = on_error
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()

    def __call__(
        self,
        dialect: str,
        headers: Mapping[str, str],
        body: Mapping[str, Any],
        status: int,
        content_type: str,
        data: bytes,
    ) -> None:
        try:
            carried: list[ToolResultRef] = []
            fresh: list[ToolResultSeen] = []
            for cid, text, err in tool_results(dialect, body):
                sha = _sha(text)
                carried.append(ToolResultRef(call_id=cid[:512], sha256=sha))
                with self._lock:
                    new = (cid, sha) not in self._seen
                    self._seen.add((cid, sha))
                if new:
                    fresh.append(
                        ToolResultSeen(
                            call_id=cid[:512], sha256=sha, length=len(text), is_error=err,
                            excerpt=excerpt(text),
                        )
                    )  # fmt: skip
            asked = []
            if 200 <= status < 300:
                asked = [
                    AskedCall(call_id=i[:512], name=n[:512])
                    for i, n in asked_calls(dialect, content_type, data)
                ]
            self._append(
                ModelExchange(
                    **self._ref,
                    call_id=headers.get("x-afb-call-id", ""),
                    dialect=dialect,
                    turn=D.assistant_turns(dialect, body),  # type: ignore[arg-type]
                    status=status,
                    carried=carried,
                    results=fresh,
                    asked=asked,
                )
            )
        except Exception as exc:  # the answer still goes out; the evidence gap is the harness's
            if self._on_error is None:
                raise
            self._on_error(f"{type(exc).__name__}: {exc}")
