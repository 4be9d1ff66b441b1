"""Model cassettes: what the model proxy answers in `replay` and `scripted` mode, and records.

A cassette is a content-addressed blob of a run (`cassette_digest`: sha256 over its RFC 8785
bytes). Runtime only: a spec declares the digest of its cassettes folder in the subject's config
(`model.digest`), which `subject_config_hash` covers as written, so the evaluator never reads a
cassette and a new cassette version does not move `evaluator_digest`. Three kinds:

- `recorded` (written by `record` mode, served by `replay`): one exchange per (request key,
  occurrence). The request key is `request_key(dialect, normalize_request(body))`: sha256 over
  the canonical JSON of `{"dialect", "request"}`, where the request is the body the subject sent
  minus the top-level fields in `VOLATILE_FIELDS` (per-session identifiers that differ between
  two runs of the same conversation). `stream` stays in the key: a streamed and a plain answer
  are different bytes. The occurrence is the 1-based count of that key within one attempt. The
  response is kept as its exact bytes (status, content type, body), so replay is byte-identical.
  The normalized request is kept too: the key is re-derived on load (an edited request is an
  error) and a divergence can be explained against it.
- `scripted` (authored): turn N answers every request whose conversation already holds N
  assistant turns, in whatever dialect was asked, streamed or not; a relaunched agent that
  starts over therefore gets the same answers.
- `policy` (authored, served in `scripted` mode): the answer is chosen by declared rules over
  the request (the last tool result, the tool it answers, how often a tool was called, what a
  status query said), so the model reacts to what the agent tells it. Format, selection and
  the static checks: policy.py here (`PolicyCassette`); load.py reads either kind.

Never in a cassette: request headers (the upstream key travels only there) and timestamps.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from runner.evaluator.core.canonical import digest
from runner.evaluator.core.types import Digest, Frozen

CASSETTE_VERSION = 1
Dialect = Literal["openai-chat", "openai-responses", "anthropic-messages"]
DIALECTS: tuple[Dialect, ...] = ("openai-chat", "openai-responses", "anthropic-messages")
# Top-level request fields that identify a session or a user, not the conversation.
VOLATILE_FIELDS = ("metadata", "user", "prompt_cache_key", "safety_identifier")


def normalize_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as it enters the content address: `body` minus `VOLATILE_FIELDS`."""
    return {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}


def request_key(dialect: Dialect, normalized: Mapping[str, Any]) -> str:
    """The content address of a normalized request in one dialect."""
    return digest({"dialect": dialect, "request": dict(normalized)})


class RecordedResponse(Frozen):
    status: int = Field(ge=100, le=599)
    content_type: str
    body: str = Field(description="the response bytes: UTF-8 text, or base64 (body_encoding)")
    body_encoding: Literal["utf-8", "base64"] = "utf-8"

    def body_bytes(self) -> bytes:
        if self.body_encoding == "base64":
            return base64.b64decode(self.body, validate=True)
        return self.body.encode("utf-8")

    @model_validator(mode="after")
    def _decodes(self) -> RecordedResponse:
        if self.body_encoding == "base64":
            try:
                base64.b64decode(self.body, validate=True)
            except binascii.Error as exc:
                raise ValueError("body is not valid base64") from exc
        return self


class RecordedExchange(Frozen):
    key: Digest
    occurrence: int = Field(ge=1)
    dialect: Dialect
    request: dict[str, Any]
    response: RecordedResponse

    @model_validator(mode="after")
    def _key_matches(self) -> RecordedExchange:
        if normalize_request(self.request) != self.request:
            raise ValueError(f"request holds volatile fields {VOLATILE_FIELDS}")
        want = request_key(self.dialect, self.request)
        if want != self.key:
            raise ValueError(f"key {self.key} is not the request's content address {want}")
        return self


class ToolCall(Frozen):
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    # openai-responses only: the function call's `namespace` (a tool of a `type: namespace`
    # tool group, as Codex CLI declares MCP tools: namespace `mcp__<server>`, name `<tool>`).
    # Left out of the dump when unset, so existing cassettes keep their bytes and digests.
    namespace: str | None = Field(
        default=None, min_length=1, max_length=200, exclude_if=lambda v: v is None
    )


class ScriptedTurn(Frozen):
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _says_something(self) -> ScriptedTurn:
        if not self.text and not self.tool_calls:
            raise ValueError("a turn needs text or tool_calls")
        return self


class Cassette(Frozen):
    version: Literal[1]
    kind: Literal["recorded", "scripted"]
    model: str = Field(default="afb-scripted", min_length=1, description="scripted answers' model")
    on_repeat: Literal["divergence", "reuse_last"] = Field(
        default="divergence",
        description="replay: a request seen more often than recorded is a divergence, or gets "
        "the last recorded occurrence's answer again",
    )
    recorded: tuple[RecordedExchange, ...] = ()
    turns: tuple[ScriptedTurn, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Cassette:
        if self.kind == "recorded" and self.turns:
            raise ValueError("a recorded cassette has no `turns`")
        if self.kind == "scripted" and self.recorded:
            raise ValueError("a scripted cassette has no `recorded` exchanges")
        if self.kind == "scripted" and not self.turns:
            raise ValueError("a scripted cassette needs at least one turn")
        seen: dict[str, int] = {}
        for i, ex in enumerate(self.recorded):
            expected = seen.get(ex.key, 0) + 1
            if ex.occurrence != expected:
                raise ValueError(
                    f"recorded[{i}]: occurrence {ex.occurrence} of {ex.key}, expected {expected}"
                )
            seen[ex.key] = expected
        ids = [c.id for t in self.turns for c in t.tool_calls]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"tool call ids used twice: {dup}")
        return self

    def lookup(self, key: str, occurrence: int) -> RecordedExchange | None:
        """The exchange recorded for (key, occurrence), honouring `on_repeat`."""
        last = None
        for ex in self.recorded:
            if ex.key == key:
                if ex.occurrence == occurrence:
                    return ex
                last = ex
        return last if self.on_repeat == "reuse_last" else None


def where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"
