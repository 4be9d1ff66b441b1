"""What a fault kind may be built from: one attempt's endpoints, each as a typed protocol.

The attempt (`runner.runtime.attempt.run`) fills one `AttemptResources` and asks the plan's
kind for its plugin (`registry.build`: the kind's `FaultPlugin.build(resources, params)`, with
the kind's own parameter model); it never names a kind. The attempt also resolves the route of
the triggered tool's calls, so that no plugin has to know the attempt's wiring:

- `egress`: the egress proxy that carries those calls and counts their bytes -- the attempt's
  egress proxy, or for tool `model` the model proxy's front (an egress proxy too);
- `ledger`: where their effects are committed, read independently of the proxy -- the
  destination, or for tool `model` the model proxy's backend ledger (scoped by the request's
  `model` field);
- `effect_endpoint`: what the subject itself connects to for them, i.e. what a partition cuts --
  the egress proxy, the MCP endpoint when the subject is served its tools over MCP, or the
  model proxy's front.

Protocols rather than the concrete classes: a plugin depends on what it reads, and a test can
hand it a stand-in. This module sits beside the fault base, below the attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from runner.runtime.host.nft import DropRule
from runner.runtime.host.prober import NetnsProber
from runner.runtime.host.procs import Subject
from runner.runtime.interposers.egress import ConnectionRecord, ExchangeRecord
from runner.runtime.sandbox.base import Sandbox

__all__ = [
    "AttemptResources",
    "CallRecorder",
    "EffectLedger",
    "Endpoint",
    "Netns",
    "ProcessRegistry",
    "RuleTable",
    "SubjectLimits",
    "ToolEndpoint",
    "held_call_observation",
]


class Endpoint(Protocol):
    """Anything the subject connects to over TCP."""

    @property
    def address(self) -> tuple[str, int]: ...


class CallRecorder(Endpoint, Protocol):
    """An egress proxy: its record of each exchange (byte counts, phases, the subject's end)."""

    def find_call(
        self, call_id: str, connection_id: str | None = None
    ) -> tuple[ConnectionRecord, ExchangeRecord] | None: ...


class ToolEndpoint(Endpoint, Protocol):
    """The tool interposer: sessions with epochs, and its log of calls and sessions."""

    @property
    def epoch(self) -> int: ...

    def bump_epoch(self) -> int: ...

    def call_observation(self, call_id: str) -> dict[str, Any]: ...

    def session_observation(self, old_epoch: int) -> dict[str, Any]: ...


class ProcessRegistry(Protocol):
    """The attempt's record of its subject processes (`runner.runtime.attempt.subject`)."""

    def current(self) -> Subject | None: ...

    def expect_relaunch(self) -> None: ...

    def request_relaunch(self, reason: str) -> None: ...


class RuleTable(Protocol):
    """The attempt's own nft table in the subject's namespace (`runner.runtime.host.nft`)."""

    @property
    def name(self) -> str: ...

    def add_drop(self, daddr: str, dport: int, protocol: str = "tcp") -> DropRule: ...

    def rules(self) -> list[DropRule]: ...

    def get_rule(self, rule_id: str) -> DropRule | None: ...

    def remove_rule(self, rule_id: str) -> None: ...


class Netns(Protocol):
    """The subject's network namespace (`runner.runtime.host.netns.AttemptNetwork`)."""

    @property
    def netns(self) -> str: ...

    def prober(self) -> NetnsProber: ...


@dataclass(frozen=True)
class EffectLedger:
    """The effects' own record: `GET /effects?scope=S` at `address`; a request's scope is its
    JSON body's `scope_field`."""

    address: tuple[str, int]
    scope_field: str = "scope"


@dataclass(frozen=True)
class SubjectLimits:
    """What a subject's adapter bounds it by (`SubjectCommand`): a kind may refuse a fault that
    cannot fit them (`FaultPlugin.check_subject`), before any cell runs."""

    timeout_s: float
    max_relaunches: int


@dataclass(frozen=True)
class AttemptResources:
    """One attempt's endpoints, as a fault plugin may use them (see the module docstring)."""

    sandbox: Sandbox
    interposer: ToolEndpoint
    egress: CallRecorder
    ledger: EffectLedger
    effect_endpoint: Endpoint
    subjects: ProcessRegistry  # a subject's exit: wait on its own handle, never by pid
    netns: Netns
    table: RuleTable


def held_call_observation(
    interposer: ToolEndpoint,
    proxy: CallRecorder | None,
    call_id: str,
    source: str,
    context: Any,
) -> dict[str, Any]:
    """The `interposer_call` observation of a call held in flight (sigkill, freeze): the record
    of the interposer that carried it, or for a proxied tool call (the engine labels it
    `egress_proxy`) the proxy's exchange record, found by call id and connection."""
    if source != "egress_proxy":
        return {**interposer.call_observation(call_id), "source": source}
    found = proxy.find_call(call_id, context.get("connection_id")) if proxy else None
    if found is None:
        return {"source": source, "call_id": "", "seen": False}
    conn, ex = found
    return {
        "source": source,
        "seen": True,
        "call_id": ex.call_id,
        "tool": ex.tool,
        "connection_id": conn.connection_id,
        "phases": list(ex.phases),
        "outcome": ex.outcome,
        "in_flight": ex.outcome == "pending",
    }
