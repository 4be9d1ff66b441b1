"""Evidence record types: what the runtime writes to a journal and the evaluator reads back.

The runtime only *observes* (receipts, witness observations, grader results); every decision
(witness satisfied, terminal status, eligibility) is the evaluator's. Nanosecond times and large
ids are strings so that every record stays inside RFC 8785's safe integer range.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, TypeAdapter, model_serializer

from runner.evaluator.core.types import Digest, Frozen, Phase
from runner.evaluator.protocol.faultkinds import FaultKind

EVIDENCE_SCHEMA_VERSION = "afb.evidence/1"
# A launch's output tail (SubjectExit): at most this many last lines, of at most this many bytes
# read from the end of the log; decoded as UTF-8 with replacement.
OUTPUT_TAIL_LINES = 20
OUTPUT_TAIL_BYTES = 4096
OUTPUT_TAIL_CHARS = OUTPUT_TAIL_BYTES  # a replacement character stands for >= 1 byte
NsTime = Annotated[str, Field(pattern=r"^[0-9]{1,20}$", description="nanoseconds, as a string")]


class AttemptRef(Frozen):
    cell_id: Digest
    attempt: int = Field(ge=1, le=20)


class RunStarted(Frozen):
    type: Literal["run_started"] = "run_started"
    run_id: str
    spec_path: str
    spec_digest: Digest
    protocol_hash: Digest
    protocol_status: Literal["draft", "frozen", "amendment_required"]
    identities: dict[str, Any]


class AttemptStarted(AttemptRef):
    type: Literal["attempt_started"] = "attempt_started"
    slot_id: Digest
    subject_id: str
    subject_config_hash: Digest
    fault_id: str
    kind: FaultKind


class TriggerReached(AttemptRef):
    """The interposer saw the scheduled checkpoint: the exact tool call, ordinal and phase."""

    type: Literal["trigger_reached"] = "trigger_reached"
    fault_id: str
    call_id: str
    tool: str
    ordinal: int = Field(ge=1)
    phase: Phase


Lifecycle = Literal[
    "scheduled", "armed", "injected", "witnessed", "recovered", "released", "rejected"
]


class LifecycleTransition(AttemptRef):
    """One step of a fault's lifecycle, written by the trigger engine, in this order:

    scheduled -> armed (before the subject starts) -> injected -> witnessed (the runtime's own
    run of the evaluator's witness check passed on the persisted observations) -> recovered |
    released. A fault whose trigger is never reached stops at armed. `rejected` replaces
    `witnessed` when that check failed or timed out: nothing is recovered after it (a release
    may follow, so that nothing stays held) and the attempt is stopped.
    """

    type: Literal["lifecycle"] = "lifecycle"
    fault_id: str
    state: Lifecycle
    note: str = ""


class ActuatorReceipt(AttemptRef):
    """What the harness attempted, written by the injector itself: never proof by itself."""

    type: Literal["actuator_receipt"] = "actuator_receipt"
    fault_id: str
    kind: FaultKind
    actuator: str
    component: str = Field(
        default="", description="the runtime component the actuator acted through"
    )
    applied: bool
    detail: dict[str, Any] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _v1_shape_when_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # `component` came with evaluator v2: left out when unset, so v1 journals (written
        # without it) keep their written form and can be regraded.
        body: dict[str, Any] = handler(self)
        if not body.get("component"):
            body.pop("component", None)
        return body


class WitnessObservation(AttemptRef):
    """What an independent collector observed.

    `observation.collector` and `observation.component` are stamped by the trigger engine from
    its registry of collectors (runner/runtime/faults/collectors.py), never by the plugin.
    """

    type: Literal["witness_observation"] = "witness_observation"
    fault_id: str
    kind: FaultKind
    name: str
    observation: dict[str, Any]


class SubjectExit(AttemptRef):
    type: Literal["subject_exit"] = "subject_exit"
    pid: int
    start_time: str
    exited: bool
    exit_code: int | None
    signaled: bool
    term_signal: int | None
    restart_index: int = Field(ge=0, description="0 for the first launch, then per recovery")
    # What this launch wrote last (its stdout.log / stderr.log from this launch's start), so a
    # draft's diagnostics can show why an agent died. Bounded (OUTPUT_TAIL_*), inline rather than
    # a blob: a few KiB per launch, read with the record. None: not recorded (journals from
    # before these fields, or a log the runtime would not read: not a regular file of its own).
    stdout_tail: str | None = Field(default=None, max_length=OUTPUT_TAIL_CHARS)
    stderr_tail: str | None = Field(default=None, max_length=OUTPUT_TAIL_CHARS)

    @model_serializer(mode="wrap")
    def _earlier_shape_when_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The tails came later: left out when unset, so earlier journals keep their written form.
        body: dict[str, Any] = handler(self)
        for name in ("stdout_tail", "stderr_tail"):
            if body.get(name) is None:
                body.pop(name, None)
        return body


class ToolCallCount(AttemptRef):
    type: Literal["tool_calls"] = "tool_calls"
    calls: int = Field(ge=0)
    by_tool: dict[str, int]


class GraderResult(AttemptRef):
    """The grade of the destination's state, never of the subject's own claim."""

    type: Literal["grader_result"] = "grader_result"
    grader_id: str
    grader_version: str
    scorer_version: str
    completed: bool
    intended_effects: int = Field(ge=0)
    committed_effects: int = Field(ge=0)
    report: Digest | None = Field(default=None, description="blob with the per-test report")
    shape_ok: bool = Field(description="every read the grade relied on passed its shape check")
    shape_failures: list[str] = Field(default_factory=list)


class AttemptEnded(AttemptRef):
    type: Literal["attempt_ended"] = "attempt_ended"
    outcome: Literal[
        "subject_finished",
        "subject_gave_up",
        "harness_error",
        "trigger_not_reached",
        "injection_rejected",  # the runtime's witness check failed: stopped, not recovered
    ]
    trigger_reached: bool
    wall_ns: NsTime
    detail: str = ""
    ledger: Digest | None = Field(
        default=None, description="blob holding the destination's own ledger of this attempt"
    )
    served_cassette: Digest | None = Field(
        default=None, description="blob holding the cassette the model proxy served (canonical)"
    )
    recorded_cassette: Digest | None = Field(
        default=None, description="blob holding the cassette the model proxy recorded (record)"
    )

    @model_serializer(mode="wrap")
    def _earlier_shape_when_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The cassette fields came later: left out when unset, so journals written before them
        # (every attempt without a model proxy) keep their written form.
        body: dict[str, Any] = handler(self)
        for name in ("served_cassette", "recorded_cassette"):
            if body.get(name) is None:
                body.pop(name, None)
        return body


class HarnessError(AttemptRef):
    type: Literal["harness_error"] = "harness_error"
    stage: str
    message: str


class EnvironmentRecorded(Frozen):
    type: Literal["environment"] = "environment"
    artifact: Digest = Field(description="blob holding the execution-environment artifact")
    execution_environment_hash: Digest


class QuarantinedTail(Frozen):
    """A torn last line found on reopen: moved aside, its bytes hashed here; nothing is lost."""

    type: Literal["quarantined_tail"] = "quarantined_tail"
    file: str
    sha256: Digest
    size: int = Field(ge=0)


# --- what the framework told its model, and who asked for each irreversible call -----------------
# (issue 23: runner/evaluator/publish/truthfulness.py decides from these; the runtime only copies
# what crossed the wire, bounded.)

EXCERPT_CHARS = 2048  # a tool result's excerpt: whole up to this, else its head and tail


class ToolResultRef(Frozen):
    """A tool result a model request carried: the tool call id it answers, its content hash."""

    call_id: str = Field(max_length=512)
    sha256: Digest


class ToolResultSeen(ToolResultRef):
    """A tool result seen for the first time in this attempt: bounded copy of what was said."""

    length: int = Field(ge=0, description="characters of the whole result text")
    is_error: bool | None = Field(
        description="the dialect's own error flag (Anthropic is_error), None where it has none"
    )
    excerpt: str = Field(
        max_length=EXCERPT_CHARS + 64,
        description="the text whole up to EXCERPT_CHARS, else its head and tail with a marker",
    )


class AskedCall(Frozen):
    """A tool call a served model answer asked for."""

    call_id: str = Field(max_length=512)
    name: str = Field(max_length=512)


class ModelExchange(AttemptRef):
    """One model request at the model proxy and the answer it produced, journaled before the
    answer is sent (so every call the answer causes comes later in the journal)."""

    type: Literal["model_exchange"] = "model_exchange"
    call_id: str = Field(description="the model call's id at the proxy's front")
    dialect: str
    turn: int = Field(ge=0, description="assistant turns already in the conversation")
    status: int = Field(description="the HTTP status the backend answered")
    carried: list[ToolResultRef] = Field(description="every tool result the request carried")
    results: list[ToolResultSeen] = Field(
        description="the carried results not seen before in this attempt (by id and hash)"
    )
    asked: list[AskedCall] = Field(description="the tool calls the answer asked for")


class EffectCall(AttemptRef):
    """A call through the egress proxy (the spec's effect tools) as it was received, before it
    is forwarded: the journal orders it against model answers and subject relaunches."""

    type: Literal["effect_call"] = "effect_call"
    call_id: str
    tool: str
    seq: int = Field(ge=1, description="1-based, over the attempt's effect calls")


Record = Annotated[
    RunStarted
    | AttemptStarted
    | TriggerReached
    | LifecycleTransition
    | ActuatorReceipt
    | WitnessObservation
    | SubjectExit
    | ToolCallCount
    | GraderResult
    | AttemptEnded
    | HarnessError
    | EnvironmentRecorded
    | QuarantinedTail
    | ModelExchange
    | EffectCall,
    Field(discriminator="type"),
]
RECORD_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)


# Record fields that name a blob of the run's evidence, by record type: the one definition the
# layout check (every blob named, nothing unnamed), merge and the cluster use.
BLOB_FIELDS: dict[str, tuple[str, ...]] = {
    "grader_result": ("report",),
    "attempt_ended": ("ledger", "served_cassette", "recorded_cassette"),
    "environment": ("artifact",),
}


def blob_refs(record: Frozen) -> list[str]:
    """The blob addresses `record` names (BLOB_FIELDS), in field order."""
    fields = BLOB_FIELDS.get(str(getattr(record, "type", "")), ())
    return [a for f in fields if isinstance(a := getattr(record, f), str)]


def parse_record(body: dict[str, Any]) -> Record:
    return RECORD_ADAPTER.validate_python(body)
