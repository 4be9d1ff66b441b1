"""The registry of witness collectors: who may observe, and which runtime component each reads.

A plugin declares, per observation, the name of a registered collector (`Observed(name,
stage)`); the trigger engine -- not the plugin -- stamps `collector` and `component` into the
persisted observation from this registry. A plugin that labels its own observation otherwise is
a harness error, so a record cannot be filed under another collector's name.

`TRIGGERING_INTERPOSER` is declared where the observation is the record of the triggering call
kept by whichever interposer carried it: the engine resolves it from the event's `source`
(which the interposer reported, not the plugin) to `tool_interposer` or `egress_proxy`.

`component` is what a contract's `independent_of_actuator` compares with the actuator's own
component (`FaultPlugin.actuator_component`, written into the receipt).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Collector:
    name: str
    component: str  # the runtime component whose state it reads
    description: str = ""


TRIGGERING_INTERPOSER = "<triggering interposer>"
INTERPOSERS = ("egress_proxy", "tool_interposer")  # the event sources TRIGGERING_INTERPOSER means

_COLLECTORS: dict[str, Collector] = {}


def register_collector(c: Collector) -> Collector:
    """Register a collector; registering the same one again is a no-op, another one an error."""
    if not c.name or not c.component or c.name == TRIGGERING_INTERPOSER:
        raise ValueError(f"invalid collector {c!r}")
    old = _COLLECTORS.get(c.name)
    if old is not None and old != c:
        raise ValueError(f"collector {c.name!r} is already registered as {old!r}")
    _COLLECTORS[c.name] = c
    return c


def unregister_collector(name: str) -> None:
    """Remove a collector (tests that register a throw-away one)."""
    _COLLECTORS.pop(name, None)


def collector(name: str) -> Collector:
    try:
        return _COLLECTORS[name]
    except KeyError:
        raise KeyError(f"no registered collector {name!r}") from None


def is_registered(name: str) -> bool:
    return name in _COLLECTORS


def possible(declared: str) -> frozenset[str]:
    """The collector names a declaration can resolve to."""
    return frozenset(INTERPOSERS) if declared == TRIGGERING_INTERPOSER else frozenset([declared])


for _c in (
    Collector("egress_proxy", "egress_proxy", "the egress proxy's per-exchange records"),
    Collector("tool_interposer", "tool_interposer", "the tool interposer's call/session log"),
    Collector("destination_ledger", "destination", "the destination's own ledger, over HTTP"),
    Collector("reaper", "reaper", "the run's single waitpid reaper"),
    Collector("process_registry", "subject_registry", "the attempt's launches + /proc"),
    Collector("sandbox_inspector", "container_runtime", "container inspect + the boot token"),
    Collector("nft_reader", "nftables", "the attempt's nft table read back (`nft -j`)"),
    Collector("netns_prober", "netns_prober", "TCP probes from inside the subject's netns"),
):
    register_collector(_c)
