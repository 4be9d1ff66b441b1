"""What an interposer tells the trigger engine, and what it is told back.

The low module of the runtime's fault machinery: the interposers (tool interposer, egress proxy,
model proxy, MCP endpoint) report each call's semantic checkpoints to an `EventSink` and apply
the `Directive` of the `Decision` they get; the trigger engine (`runner.runtime.attempt.triggers`)
is one such sink, the fault plugins (`runner.runtime.faults`) see the `CallEvent` that fired them.
Here, below all three, so that no interposer imports the engine nor a fault kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from runner.evaluator.core.types import Phase

__all__ = ["CallEvent", "Decision", "Directive", "EventSink", "NullSink"]


class Directive(StrEnum):
    """What the interposer does with the triggering call once the handler returns."""

    CONTINUE = "continue"
    DROP_RESPONSE = "drop_response"  # finish the effect upstream, deliver zero response bytes
    CLOSE_WITHOUT_RESPONSE = "close_without_response"  # close the subject's connection now

    @property
    def strength(self) -> int:
        return _STRENGTH[self]


_STRENGTH = {
    Directive.CONTINUE: 0,
    Directive.DROP_RESPONSE: 1,
    Directive.CLOSE_WITHOUT_RESPONSE: 2,
}


@dataclass(frozen=True)
class CallEvent:
    """One semantic checkpoint of one call at an interposer."""

    source: str  # "tool_interposer" | "egress_proxy"
    tool: str
    phase: Phase
    call_id: str
    ordinal: int  # the Nth call of `tool` in this attempt, counted at `received`
    any_ordinal: int  # the Nth call of any tool
    context: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"connection_id": ...}


class Decision:
    """The engine's answer to one event: a directive, and `complete()` to call once applied.

    Interposers must call `complete()` after they applied the directive (response delivered,
    or connection closed and its end observed); it runs deferred witness collection. Idempotent.
    """

    def __init__(
        self,
        directive: Directive = Directive.CONTINUE,
        on_complete: Callable[[], None] | None = None,
    ) -> None:
        self.directive = directive
        self._on_complete = on_complete
        self._lock = threading.Lock()

    def complete(self) -> None:
        with self._lock:
            fn, self._on_complete = self._on_complete, None
        if fn is not None:
            fn()


class EventSink(Protocol):
    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision: ...


class NullSink:
    """For interposers running without faults: every call continues."""

    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        return Decision()
