"""Fault kinds as plugins of the trigger engine; the interface is in `base`.

Kinds live in their own modules (`lost_response`, ...) and are imported from there, so that
importing this package stays cheap and free of import cycles with the interposers.
"""

from runner.runtime.faults.base import (
    CallEvent,
    Directive,
    FaultContext,
    FaultPlugin,
    Injection,
    NoopActuator,
    Observations,
    Observed,
    PluginContractError,
    WitnessStage,
    check_against_contract,
    stamp_observations,
    validate_plugin,
)

__all__ = [
    "CallEvent",
    "Directive",
    "FaultContext",
    "FaultPlugin",
    "Injection",
    "NoopActuator",
    "Observations",
    "Observed",
    "PluginContractError",
    "WitnessStage",
    "check_against_contract",
    "stamp_observations",
    "validate_plugin",
]
