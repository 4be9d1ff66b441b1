"""The two domains' tools, and one call path: read tools answer, write tools commit + journal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.benchmarks.tau_lite import airline, retail
from runner.benchmarks.tau_lite.intents import INTENTS
from runner.benchmarks.tau_lite.store import CallOutcome, DomainError, Store, Tx
from runner.benchmarks.tau_lite.tooling import Tool

TOOLS: dict[str, dict[str, Tool]] = {"airline": airline.TOOLS, "retail": retail.TOOLS}

# every write tool has an intent rule, and nothing else has one
for _d, _tools in TOOLS.items():
    assert {n for n, t in _tools.items() if t.kind == "write"} == set(INTENTS[_d]), _d


def write_tools(domain: str) -> list[str]:
    return sorted(n for n, t in TOOLS[domain].items() if t.kind == "write")


def call(
    store: Store,
    name: str,
    args: Any,
    *,
    scope: str,
    idempotency_key: str | None = None,
    dedup: bool = False,
    call_id: str | None = None,
) -> CallOutcome:
    """One tool call on `store`. A refused call (unknown tool, misfit arguments, a domain
    rule) is an outcome with `ok=False`: the agent's error, never an exception. Write tools
    (committed or refused) are journaled in the ledger; reads and generic tools are not."""
    tool = TOOLS[store.domain].get(name)
    if tool is None:
        return CallOutcome(name, False, error=f"Tool '{name}' not found.")
    if tool.kind != "write":
        try:
            return CallOutcome(name, True, store.read(tool.fn, tool.bind(args)))
        except DomainError as exc:
            return CallOutcome(name, False, error=str(exc))
    rule = INTENTS[store.domain][name]

    def intent(tx: Tx, raw: Mapping[str, Any]) -> str:
        return rule(tx, tool.bind(raw))

    def run(tx: Tx, **raw: Any) -> Any:
        return tool.fn(tx, **tool.bind(raw))

    return store.write(
        name,
        run,
        args if isinstance(args, Mapping) else {"_": args},
        scope=scope,
        intent=intent,
        idempotency_key=idempotency_key,
        dedup=dedup,
        call_id=call_id,
    )
