"""The MCP tool server's catalogue and results: what each tool is called, takes and returns.

Why apart from `mcp_tools`: this is the subject-facing contract (names, JSON Schemas, annotations,
error shapes; documented in docs/SUBJECTS.md), and it changes for other reasons than the
transport beside it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types

from runner.runtime.interposers.tools import STATUS_TOOL, TOOLS, Reply

_SANDBOX_SCHEMAS: dict[str, dict[str, Any]] = {
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "absolute path in the sandbox"}},
        "required": ["path"],
    },
    "write_file": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "absolute path in the sandbox"},
            "content": {"type": "string", "description": "UTF-8 text to write"},
            "content_b64": {"type": "string", "description": "or: base64 bytes to write"},
        },
        "required": ["path"],
    },
    "exec": {
        "type": "object",
        "properties": {
            "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "stdin": {"type": "string"},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "seconds"},
        },
        "required": ["argv"],
    },
    "run_tests": {
        "type": "object",
        "properties": {
            "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "timeout": {"type": "number", "exclusiveMinimum": 0},
        },
    },
}
_SANDBOX_DESCRIPTIONS = {
    "read_file": "Read a file in the sandbox: {content} (UTF-8) or {content_b64}.",
    "write_file": "Write a file in the sandbox (content or content_b64): {bytes}.",
    "exec": "Run argv in the sandbox (no shell unless you call one): {exit_code, stdout, stderr}.",
    "run_tests": "Run the task's tests (or argv): {exit_code, stdout, stderr, passed}.",
}
_STATUS_DESCRIPTION = (
    "Has a submission of this attempt been committed? Read-only, from the destination's ledger: "
    "{scope, committed, effects, effect_ids}."
)
_EFFECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "payload": {"type": "object", "description": "the effect's content, e.g. {patch: ...}"},
        "idempotency_key": {"type": "string", "description": "a repeated key commits once"},
        "kind": {"type": "string"},
    },
    "required": ["payload"],
}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ToolDecl(Protocol):
    """A spec `[[tools]]` entry (`runner.evaluator.protocol.spec.Tool` satisfies it)."""

    @property
    def name(self) -> str: ...
    @property
    def irreversible(self) -> bool: ...
    @property
    def description(self) -> str: ...


@dataclass(frozen=True)
class EffectRoute:
    """An effect tool: the HTTP request it stands for at the destination, via the proxy."""

    tool: str
    method: str = "POST"
    path: str = "/effects"
    kind: str = "patch"  # the effect kind written when the call names none


@dataclass(frozen=True)
class Effects:
    """Where effect tools go: the egress proxy (its events, its byte counts), and the scope."""

    egress: tuple[str, int]
    scope: str
    routes: Sequence[EffectRoute]
    query_tool: str | None = "list_effects"  # read-only GET /effects?scope=...; no events
    timeout: float = 60.0

    @classmethod
    def from_proxy_tools(
        cls,
        egress: tuple[str, int],
        scope: str,
        proxy_tools: Mapping[tuple[str, str], str],
        **kw: Any,
    ) -> Effects:
        """From an attempt plan's `proxy_tools` ((method, path) -> tool name)."""
        routes = [EffectRoute(tool, m, p) for (m, p), tool in sorted(proxy_tools.items())]
        return cls(egress, scope, routes, **kw)


def catalogue(decls: Sequence[ToolDecl] | None, effects: Effects | None) -> list[types.Tool]:
    """The MCP tools for the spec's `[[tools]]` (`decls`; None: the four sandbox tools plus
    every effect route): each a sandbox tool or an effect route's tool, else ValueError."""
    routes = {r.tool: r for r in (effects.routes if effects else ())}
    if decls is None:
        names = [(n, False, "") for n in TOOLS] + [(r, True, "") for r in routes]
    else:
        names = [(d.name, d.irreversible, d.description) for d in decls]
    out: list[types.Tool] = []
    for name, irreversible, description in names:
        if name in TOOLS:
            schema, desc = _SANDBOX_SCHEMAS[name], _SANDBOX_DESCRIPTIONS[name]
            read_only = name == "read_file"
        elif name == STATUS_TOOL:  # served by the interposer, listed only when declared
            schema, desc, read_only = _EMPTY_SCHEMA, _STATUS_DESCRIPTION, True
        elif name in routes:
            schema = _EFFECT_SCHEMA
            desc = f"Commit an effect at the destination ({routes[name].path})."
            read_only = False
        else:
            raise ValueError(
                f"tools: {name!r} has no MCP handler (sandbox tools: {[*TOOLS, STATUS_TOOL]}; "
                f"effect tools: {sorted(routes)})"
            )
        out.append(
            types.Tool(
                name=name,
                description=description or desc,
                input_schema=schema,
                annotations=types.ToolAnnotations(
                    read_only_hint=read_only,
                    destructive_hint=irreversible,
                    idempotent_hint=read_only,
                    open_world_hint=name in routes,
                ),
            )
        )
    if effects is not None and effects.query_tool:
        out.append(
            types.Tool(
                name=effects.query_tool,
                description="List the effects committed in this attempt's scope (read-only).",
                input_schema=_EMPTY_SCHEMA,
                annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
            )
        )
    names_seen = [t.name for t in out]
    if len(set(names_seen)) != len(names_seen):
        raise ValueError(f"tools: duplicate tool names in {names_seen}")
    return out


# --- results ----------------------------------------------------------------------------------


def result(data: dict[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=data, is_error=is_error
    )


def tool_result(body: dict[str, Any]) -> types.CallToolResult:
    if body.get("ok"):
        return result(dict(body["result"]))
    return result({"error": "tool_error", "message": str(body.get("error", ""))}, is_error=True)


def error(code: str, message: str) -> types.CallToolResult:
    return result({"error": code, "message": message}, is_error=True)


def stale(reply: Reply, *, ran: bool) -> types.CallToolResult:
    b = reply.body
    if b.get("error") != "stale_session":
        return error(str(b.get("error", "refused")), f"refused: {b}")
    old, new = b.get("session_epoch"), b.get("epoch")
    what = (
        "it restarted while this call ran, so its result was discarded"
        if ran
        else "this call did not run"
    )
    message = (
        f"sandbox restarted: your session belonged to sandbox epoch {old}, the sandbox is now "
        f"epoch {new}; {what}. Processes and unsaved state of the old sandbox are gone. Your "
        "next tool call reattaches to the new sandbox."
    )
    return result(
        {"error": "stale_session", "session_epoch": old, "epoch": new, "message": message},
        is_error=True,
    )
