"""The evaluator's shared vocabulary types: one `Frozen` base, one `Digest`, the closed enums.

Every model that is hashed or crosses a boundary is frozen and forbids extra keys. Spec models
use `StrictFrozen` as well: TOML is typed, so "3" is not an integer and 1 is not a boolean.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]

# Enumerations in a strict model are still given as their string values.
Lax = Strict(False)


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StrictFrozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Phase(StrEnum):
    """Points in one tool call's life at the interposer; triggers fire at exactly one of these."""

    RECEIVED = "received"
    DISPATCHED = "dispatched"
    EFFECT_DONE = "effect_done"
    RESPONSE_SENT = "response_sent"


class Status(StrEnum):
    """A cell's terminal status (DESIGN §4)."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBJECT_PRE_TRIGGER_FAILURE = "SUBJECT_PRE_TRIGGER_FAILURE"
    SCENARIO_MISMATCH = "SCENARIO_MISMATCH"
    INVALID_INJECTION = "INVALID_INJECTION"
    HARNESS_INVALID = "HARNESS_INVALID"


RETRYABLE = frozenset({Status.INVALID_INJECTION, Status.HARNESS_INVALID})
