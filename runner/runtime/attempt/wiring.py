"""The per-attempt services a subject may declare: the model proxy and the MCP tool endpoint.

Why separate from run.py: both are optional and each has its own module elsewhere
(runner/runtime/interposers/modelproxy, .../mcp_tools); this is the one place that knows how to
start them for an attempt, which environment variables they give the subject, and what of them
the evidence keeps. Both feed the attempt's trigger engine (model calls are tool `model`; MCP
calls are the spec's tools, with the same ordinals as the HTTP tool API). The upstream key of a
live/record model proxy is read by the proxy from the harness's environment; the subject only
ever gets the dummy key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from runner.evaluator.core.errors import InputError
from runner.runtime.attempt.api import ModelProxyPlan
from runner.runtime.cassettes.load import cassette_bytes, load_cassette
from runner.runtime.events import EventSink


@dataclass
class ModelSide:
    """A running model proxy, as the attempt sees it."""

    proxy: Any  # runner.runtime.interposers.modelproxy.ModelProxy
    subject_env: Mapping[str, str]
    served_cassette: bytes | None = None  # canonical bytes of the cassette it serves
    events: list[Any] = field(default_factory=list)

    @property
    def front(self) -> Any:
        return self.proxy.front

    @property
    def ledger_address(self) -> tuple[str, int]:
        return tuple(self.proxy.ledger_address)  # type: ignore[return-value]

    def recorded_cassette(self) -> bytes | None:
        rec = self.proxy.recorded_cassette()
        return None if rec is None else cassette_bytes(rec)


@dataclass
class McpSide:
    server: Any
    subject_env: Mapping[str, str]


def start_model_proxy(
    plan: ModelProxyPlan,
    sink: EventSink,
    host: str,
    stack: ExitStack,
    on_event: Callable[[Any], None] | None = None,
    observer: Callable[..., None] | None = None,
) -> ModelSide:
    """Start the attempt's model proxy on the subject-facing address; stopped by `stack`.

    `on_event` gets every `ProxyEvent` (a divergence, an upstream error) as it happens;
    `observer` every answered request (modelproxy/observe.py), before its answer is sent.
    """
    from runner.runtime.interposers.modelproxy import ModelProxy, Upstream

    cassette = None
    if plan.cassette is not None:
        cassette = load_cassette(plan.cassette)
    upstreams = {}
    if plan.mode in ("live", "record"):
        if plan.upstream is None or plan.key_env is None:
            raise InputError(f"model mode {plan.mode!r} needs upstream and key_env")
        upstreams[plan.provider] = Upstream(plan.provider, plan.upstream, plan.key_env)
    side = ModelSide(proxy=None, subject_env={})

    def event(ev: Any) -> None:
        side.events.append(ev)
        if on_event is not None:
            on_event(ev)

    proxy = ModelProxy(
        plan.mode,
        cassette=cassette,
        upstreams=upstreams,
        sink=sink,
        on_event=event,
        host=host,
    )
    proxy.state.observer = observer
    stack.callback(proxy.stop)
    proxy.start()
    side.proxy = proxy
    side.subject_env = dict(proxy.subject_env())
    side.served_cassette = cassette_bytes(cassette) if cassette is not None else None
    return side


def start_mcp(
    interposer: Any,
    proxy_address: tuple[str, int],
    scope: str,
    proxy_tools: Mapping[tuple[str, str], str],
    tools: Sequence[Any] | None,
    host: str,
    stack: ExitStack,
) -> McpSide:
    """Start the MCP endpoint of the spec's tools (runner/runtime/interposers/mcp_tools).

    Sandbox tools go through the attempt's tool interposer, effect tools (the submit) through
    the egress proxy: the same trigger engine, ordinals and witnesses as the HTTP API.
    """
    from runner.runtime.interposers.mcp_tools import Effects, McpToolServer

    server = McpToolServer(
        interposer,
        tools=list(tools) if tools else None,
        effects=Effects.from_proxy_tools(proxy_address, scope, dict(proxy_tools)),
        host=host,
    )
    stack.callback(server.stop)
    server.start()
    return McpSide(server=server, subject_env={"AFB_MCP_URL": str(server.url)})
