"""The fault kinds a spec may schedule: an open, registered set (not a closed enum).

A kind is judged by the evaluator, so what the evaluator needs of it lives here: its name and its
parameter model (a spec's `parameters` are validated and defaulted against it, and the defaulted
form is hashed). Its witness contract is `witnesses/<kind>.json`; its actuator is a runtime plugin
(`runner/runtime/faults/`). The five built-in kinds register below. A new kind registers its
parameter model with `register_fault_kind` (ARCHITECTURE.md, "Extension points").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from runner.evaluator.core.types import StrictFrozen

NO_FAULT = "none"  # the kind of baseline cells; implicit, never declared in a spec
SANDBOX_RESTART = "sandbox_restart"
LOST_RESPONSE = "lost_response"
SIGKILL_MID_TOOL_CALL = "sigkill_mid_tool_call"
NETWORK_PARTITION = "network_partition"
FREEZE = "freeze_mid_tool_call"

KIND_NAME = r"^[a-z][a-z0-9_]{0,63}$"


@dataclass(frozen=True)
class FaultKindDef:
    name: str
    params: type[StrictFrozen]
    # Where its witness contract is, when not `witnesses/<name>.json` of the checkout (a kind
    # registered by a test or an out-of-tree extension).
    contract: Path | None = None


_KINDS: dict[str, FaultKindDef] = {}


def register_fault_kind(
    name: str, params: type[StrictFrozen], contract: Path | None = None
) -> FaultKindDef:
    """Add a kind; registering the same definition twice is a no-op, a different one an error."""
    import re

    if not re.match(KIND_NAME, name) or name == NO_FAULT:
        raise ValueError(f"invalid fault kind name {name!r}")
    entry = FaultKindDef(name, params, contract)
    old = _KINDS.get(name)
    if old is not None and old != entry:
        raise ValueError(f"fault kind {name!r} is already registered differently")
    _KINDS[name] = entry
    return entry


def unregister_fault_kind(name: str) -> None:
    """Remove a registered kind (for tests that register a throw-away kind)."""
    _KINDS.pop(name, None)


def injected_kinds() -> tuple[str, ...]:
    """Every registered kind, sorted (baseline's `none` excluded)."""
    return tuple(sorted(_KINDS))


def kind_def(name: str) -> FaultKindDef:
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown fault kind {name!r}; registered: {list(injected_kinds())}"
        ) from None


def _known(value: str) -> str:
    if value != NO_FAULT:
        kind_def(value)
    return value


FaultKind = Annotated[str, Field(pattern=KIND_NAME), AfterValidator(_known)]


# ------------------------------------------------------------------------- the built-in kinds


class RestartParams(StrictFrozen):
    mode: Literal["restart", "recreate"] = "restart"


class LostResponseParams(StrictFrozen):
    endpoint: Literal["destination"] = "destination"


class SigkillParams(StrictFrozen):
    target: Literal["subject"] = "subject"


class PartitionParams(StrictFrozen):
    endpoint: Literal["destination"] = "destination"
    control: Literal["interposer"] = "interposer"
    release_after_blocked_attempts: int = Field(
        default=1,
        ge=1,
        le=100,
        description="release once the drop rule counted this many blocked connection attempts",
    )


# The longest subject limit an adapter accepts (subjects' `limits.timeout_s` <= 7200 s): a freeze
# must also be shorter than the limit of every subject it runs against, which the runtime checks
# before any cell runs (the subject's limit is the adapter's, not the evaluator's).
MAX_FREEZE_MS = 7_200_000


class FreezeParams(StrictFrozen):
    target: Literal["subject"] = "subject"
    method: Literal["sigstop"] = Field(
        default="sigstop",
        description="SIGSTOP to the subject's process group, SIGCONT at release",
    )
    duration_ms: int = Field(
        gt=0,
        le=MAX_FREEZE_MS,
        description="how long the subject stays stopped, counted from when the witness first "
        "saw it stopped; required, and shorter than the subject's own time limit",
    )


register_fault_kind(SANDBOX_RESTART, RestartParams)
register_fault_kind(LOST_RESPONSE, LostResponseParams)
register_fault_kind(SIGKILL_MID_TOOL_CALL, SigkillParams)
register_fault_kind(NETWORK_PARTITION, PartitionParams)
register_fault_kind(FREEZE, FreezeParams)
