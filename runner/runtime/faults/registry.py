"""Which plugin acts out each fault kind: one registration per kind, made by the kind's module.

A kind's module (`runner/runtime/faults/<kind>.py`) calls `register` with how to build its
plugin from an attempt's resources and the self-test case (`bench selftest`) that exercises it
at a point the minimal subject always reaches. Every module of this package is imported on first
use, so a new kind is one new module here plus its evaluator side (parameter model in
`runner/evaluator/protocol/faultkinds.py`, contract in `witnesses/<kind>.json`); nothing else
is edited. The no-op variant of every plugin is its own `noop()`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.evaluator.protocol.faultkinds import injected_kinds
from runner.runtime.faults.base import FaultPlugin

if TYPE_CHECKING:
    from runner.runtime.attempt.run import AttemptResources

_NOT_KINDS = {"base", "collectors", "registry"}


@dataclass(frozen=True)
class SelftestCase:
    """Trigger and parameters at which the minimal subject is certain to meet the fault."""

    trigger: Mapping[str, Any]
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultKindPlugin:
    kind: str
    build: Callable[[AttemptResources], FaultPlugin]
    selftest: SelftestCase


_PLUGINS: dict[str, FaultKindPlugin] = {}
_discovered = False


def register(entry: FaultKindPlugin) -> FaultKindPlugin:
    """Register a kind's plugin; the kind must be registered with the evaluator first."""
    if entry.kind not in injected_kinds():
        raise ValueError(
            f"fault kind {entry.kind!r} has no evaluator registration "
            "(runner.evaluator.protocol.faultkinds.register_fault_kind)"
        )
    old = _PLUGINS.get(entry.kind)
    if old is not None and old is not entry and old.build is not entry.build:
        raise ValueError(f"a plugin for fault kind {entry.kind!r} is already registered")
    _PLUGINS[entry.kind] = entry
    return entry


def unregister(kind: str) -> None:
    """Remove a kind's plugin (for tests that register a throw-away kind)."""
    _PLUGINS.pop(kind, None)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import runner.runtime.faults as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in _NOT_KINDS:
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    _discovered = True


def plugin_for(kind: str) -> FaultKindPlugin:
    _discover()
    try:
        return _PLUGINS[kind]
    except KeyError:
        raise ValueError(f"no fault plugin registered for kind {kind!r}") from None


def registered() -> tuple[str, ...]:
    """Kinds with a plugin, sorted."""
    _discover()
    return tuple(sorted(_PLUGINS))


def build_plugin(resources: AttemptResources) -> FaultPlugin:
    """The default plugin factory of an attempt: the registered plugin of its plan's kind."""
    return plugin_for(resources.plan.kind).build(resources)
