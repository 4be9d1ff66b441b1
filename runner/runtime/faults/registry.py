"""Which plugin acts out each fault kind: one registration per kind, made by the kind's module.

A kind's module (`runner/runtime/faults/<kind>.py`) calls `register` with its plugin class (which
builds itself from an attempt's resources: `FaultPlugin.build`) and the self-test case (`bench
selftest`) that exercises it at a point the minimal subject always reaches. Every module of this
package is imported on first use, so a new kind is one new module here plus its evaluator side
(parameter model in `runner/evaluator/protocol/faultkinds.py`, contract in
`witnesses/<kind>.json`); nothing else is edited. The no-op variant of every plugin is its own
`noop()`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from runner.evaluator.protocol.faultkinds import injected_kinds, kind_def
from runner.runtime.faults.base import FaultPlugin
from runner.runtime.faults.resources import AttemptResources, SubjectLimits

_NOT_KINDS = {"base", "collectors", "registry", "resources"}

# How an attempt gets its plugin: a kind's `FaultPlugin.build`, or a test's replacement.
PluginFactory = Callable[[AttemptResources, Any], FaultPlugin[Any]]


@dataclass(frozen=True)
class SelftestCase:
    """Trigger and parameters at which the minimal subject is certain to meet the fault."""

    trigger: Mapping[str, Any]
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultKindPlugin:
    plugin: type[FaultPlugin[Any]]
    selftest: SelftestCase

    @property
    def kind(self) -> str:
        return self.plugin.kind


_PLUGINS: dict[str, FaultKindPlugin] = {}
_discovered = False


def register(entry: FaultKindPlugin) -> FaultKindPlugin:
    """Register a kind's plugin; the kind must be registered with the evaluator first."""
    cls = entry.plugin
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str):
        raise ValueError(f"{cls.__name__} declares no fault kind")
    if kind not in injected_kinds():
        raise ValueError(
            f"fault kind {kind!r} has no evaluator registration "
            "(runner.evaluator.protocol.faultkinds.register_fault_kind)"
        )
    below_base = cls.__mro__[: cls.__mro__.index(FaultPlugin)]
    if not any("build" in vars(k) for k in below_base):
        raise ValueError(f"{cls.__name__} ({kind}) does not override FaultPlugin.build")
    old = _PLUGINS.get(kind)
    if old is not None and old.plugin is not cls:
        raise ValueError(f"a plugin for fault kind {kind!r} is already registered")
    _PLUGINS[kind] = entry
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


def typed_parameters(kind: str, parameters: Mapping[str, Any]) -> BaseModel:
    """A fault's parameters as its kind's model (the evaluator's), validated and defaulted."""
    return kind_def(kind).params.model_validate(dict(parameters))


def build(
    kind: str,
    resources: AttemptResources,
    parameters: Mapping[str, Any],
    factory: PluginFactory | None = None,
) -> FaultPlugin[Any]:
    """The plugin of one fault of an attempt: `factory` (a test's), else the kind's own `build`,
    given the kind's typed parameters."""
    make = factory if factory is not None else plugin_for(kind).plugin.build
    return make(resources, typed_parameters(kind, parameters))


def check_subject(
    kind: str, parameters: Mapping[str, Any], limits: SubjectLimits
) -> tuple[str, str] | None:
    """(parameter, why) when a fault of `kind` cannot run against a subject with `limits`
    (the kind's `FaultPlugin.check_subject`); None when it can, or when no plugin acts the kind
    out (its attempts say so)."""
    _discover()
    entry = _PLUGINS.get(kind)
    if entry is None:
        return None
    return entry.plugin.check_subject(typed_parameters(kind, parameters), limits)
