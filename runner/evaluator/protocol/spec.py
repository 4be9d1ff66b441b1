"""The spec language: a declarative TOML file parsed into frozen, `extra="forbid"` pydantic models.

Arrays are either *sets* (order carries no meaning; they are sorted before hashing, and duplicates
are an error) or *sequences* (order is meaning and is hashed as written). Each field says which in
its description; docs/SPEC.md lists them all. Reordering a set or the TOML tables never changes a
hash. Reading a file (and pointing at the line of a mistake) is specload.py.

One module on purpose (~470 lines): the models and their cross-reference checks are the language's
single definition, which `bench schema` and docs/SPEC.md mirror; split, a reader would have to
assemble the grammar from several files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from runner.evaluator.core.canonical import MAX_SAFE_INTEGER, canonical_bytes
from runner.evaluator.core.types import RETRYABLE, Lax, Phase, Status, StrictFrozen

from .faultkinds import NO_FAULT, FaultKind, kind_def
from .subjects import MODEL_TOOL

SPEC_SCHEMA_VERSION = "afb.spec/1"
Ident = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]


def _unique_sorted(values: list[Any], what: str) -> list[Any]:
    seen = set()
    for v in values:
        if v in seen:
            raise ValueError(f"duplicate {what} {v!r} (this array is a set)")
        seen.add(v)
    return sorted(values)


# ---------------------------------------------------------------- protocol, tools, tasks, subjects


class ProtocolSection(StrictFrozen):
    id: Ident
    version: str = Field(min_length=1, max_length=64)
    description: str = ""


class Tool(StrictFrozen):
    name: Ident
    irreversible: bool = False
    description: str = ""


class Task(StrictFrozen):
    id: Ident
    bucket: Ident
    path: str | None = Field(
        default=None, description="Task folder, relative to the spec's folder; must stay inside it."
    )


class TaskSet(StrictFrozen):
    id: Ident
    buckets: list[Ident] = Field(description="set: the buckets tasks of this set may declare")
    tasks: list[Task] = Field(min_length=1, description="set, keyed by task id")

    @field_validator("buckets")
    @classmethod
    def _buckets_set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "bucket")


JsonValue = Any


class Subject(StrictFrozen):
    id: Ident
    agent: str = Field(
        min_length=1, description="entry point of the agent, e.g. reference:idempotency_key"
    )
    config: dict[str, JsonValue] = Field(default_factory=dict)


# ------------------------------------------------------------------------------- faults, triggers


class Trigger(StrictFrozen):
    """A benchmark-owned semantic checkpoint; never a wall-clock offset."""

    event: Literal["tool_call"] = "tool_call"
    tool: str = Field(
        description="the tool name the trigger selects, '*' for any tool, or 'model' for the "
        "subject's model calls (through the model proxy)"
    )
    ordinal: int = Field(ge=1, le=10_000, description="the Nth matching call (1-based)")
    phase: Annotated[Phase, Lax]


class Applicability(StrictFrozen):
    task_sets: list[Ident] | None = Field(default=None, description="set; None = all")
    buckets: list[Ident] | None = Field(default=None, description="set; None = all")

    @field_validator("task_sets", "buckets")
    @classmethod
    def _sets(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _unique_sorted(v, "name")


class Fault(StrictFrozen):
    id: Ident
    kind: FaultKind
    trigger: Trigger
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    applies_to: Applicability = Applicability()

    @model_validator(mode="after")
    def _typed_parameters(self) -> Fault:
        if self.kind == NO_FAULT:
            raise ValueError("kind 'none' is implicit (baseline cells); do not declare it")
        # Validate against the kind's parameter model and store the fully-defaulted form, so
        # writing a default explicitly or leaving it out hashes the same.
        model = kind_def(self.kind).params
        try:
            typed = model.model_validate(self.parameters)
        except ValidationError as exc:
            raise ValueError(f"parameters for {self.kind}: {_first_error(exc)}") from exc
        object.__setattr__(self, "parameters", typed.model_dump(mode="json"))
        return self


# ---------------------------------------------------------------------------------------- policy


class AttemptPolicy(StrictFrozen):
    cap: int = Field(ge=1, le=20, description="attempts per cell, fixed in advance")
    retry_on: list[Annotated[Status, Lax]] = Field(
        default_factory=lambda: [Status.HARNESS_INVALID, Status.INVALID_INJECTION],
        description="set: only INVALID_INJECTION and HARNESS_INVALID may be retried",
    )

    @field_validator("retry_on")
    @classmethod
    def _only_invalid(cls, v: list[Status]) -> list[Status]:
        for s in v:
            if s not in RETRYABLE:
                raise ValueError(
                    f"{s.value} is a subject outcome and is final; only "
                    "INVALID_INJECTION and HARNESS_INVALID may be retried"
                )
        return _unique_sorted(v, "status")


# `fault_id` (one column per declared fault, e.g. the lost model response apart from the lost
# submit response) is opt-in: the default, hence every existing spec's hash, is unchanged.
StratumDim = Literal["fault_id", "fault_kind", "task_bucket"]
_DEFAULT_STRATA: tuple[StratumDim, ...] = ("fault_kind", "task_bucket")


class Eligibility(StrictFrozen):
    # Single-value keys, accepted so existing specs parse and hash as before: every cell needs a
    # final subject outcome (a lower floor would need per-stratum bounds), and no draft mints.
    witnessed_coverage_floor_percent: Literal[100] = Field(default=100, description="only 100")
    strata: list[StratumDim] = Field(
        default_factory=lambda: list(_DEFAULT_STRATA), description="set"
    )
    require_frozen: Literal[True] = Field(default=True, description="only true")
    not_comparable_after_invalid_attempts: int = Field(
        default=2,
        ge=1,
        le=20,
        description="invalid-injection attempts per cell after which its stratum is NOT_COMPARABLE",
    )

    @field_validator("strata")
    @classmethod
    def _strata_set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "stratum dimension")


Measure = Literal["completion", "duplicate_effects", "recovery_overhead"]


class Scoring(StrictFrozen):
    scorer_version: str = Field(min_length=1, max_length=32)
    measures: list[Measure] = Field(
        description="set: the measures a scorecard carries; an unlisted one is absent from it"
    )
    overhead_baseline: Literal["same_task_subject_seed"] = "same_task_subject_seed"
    aggregation: Literal["per_subject_and_stratum"] = "per_subject_and_stratum"

    @field_validator("measures")
    @classmethod
    def _measures_set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "measure")


_DEFAULT_EQUAL: tuple[Literal["protocol_hash", "cell_set_hash"], ...] = (
    "cell_set_hash",
    "protocol_hash",
)


class Comparison(StrictFrozen):
    """The comparison gate's rules (publish/compare.py): every scorecard carries them, and a
    comparison applies the strictest combination of its scorecards' rules."""

    require_equal: list[Literal["protocol_hash", "cell_set_hash"]] = Field(
        default_factory=lambda: list(_DEFAULT_EQUAL), description="set: identities shared by all"
    )
    require_distinct_subjects: bool = True
    require_environment_conformance: bool = True
    # Preregistered statistics (issue 25): reported and used for `bench plan`'s power, never to
    # admit a comparison. Absent -> stats.DEFAULT_ALPHA / DEFAULT_MDE, and left out of every
    # dump, so a spec without them hashes exactly as before they existed.
    alpha: float | None = Field(
        default=None, gt=0, le=0.5, description="two-sided significance level; default 0.05"
    )
    minimum_detectable_effect: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="the difference in a rate the plan must detect; default 0.2",
    )

    @field_validator("require_equal")
    @classmethod
    def _set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "field")

    @model_serializer(mode="wrap")
    def _absent_when_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _drop_none(handler(self), ("alpha", "minimum_detectable_effect"))


def _drop_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A key added after specs were frozen, left unset, is absent from the dump (and so from
    every hash), as if the key did not exist."""
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


_DEFAULT_OUTPUTS: tuple[Literal["json", "markdown"], ...] = ("json", "markdown")


class Publication(StrictFrozen):
    require_frozen: Literal[True] = Field(default=True, description="only true")
    outputs: list[Literal["json", "markdown"]] = Field(
        default_factory=lambda: list(_DEFAULT_OUTPUTS),
        description="set; json is required (every reader uses it), markdown written if listed",
    )

    @field_validator("outputs")
    @classmethod
    def _outputs_set(cls, v: list[str]) -> list[str]:
        if "json" not in v:
            raise ValueError("outputs must include 'json': every other reader works from it")
        return _unique_sorted(v, "output")


class Grader(StrictFrozen):
    id: Ident
    version: str = Field(min_length=1, max_length=32)
    image: Ident | None = Field(
        default=None, description="name of an image under the checkout's images/ (declared inputs)"
    )
    code: list[str] = Field(
        default_factory=list,
        description="set: grader source files, relative to the checkout root",
    )

    @field_validator("code")
    @classmethod
    def _code_set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "grader file")


# ----------------------------------------------------- controlled factors and source contracts


class ShapeCheck(StrictFrozen):
    """What a source's answer must look like before any value from it is believed."""

    status: int | None = Field(default=None, ge=100, le=599)
    content_type: str | None = None
    parse: Literal["json", "text", "int", "float"] = "json"
    json_schema: dict[str, JsonValue] | None = None
    scope_param: str | None = Field(
        default=None, description="the request parameter naming the scope; must be echoed"
    )
    scope_echo_path: str | None = Field(
        default=None, description="where the answer echoes the scope"
    )
    items_path: str | None = Field(default=None, description="where the answer's items are")
    item_scope_field: str | None = Field(default=None, description="each item's scope field")
    max_items: int | None = Field(default=None, ge=0)
    non_empty: bool = False
    min_bytes: int = Field(default=0, ge=0)
    max_bytes: int = Field(default=1_048_576, ge=1)


class SourceContract(StrictFrozen):
    """A typed, content-addressed source: where a value comes from and how it is read."""

    id: Ident
    provider: Literal["python", "command", "file", "http", "podman", "evaluator"]
    endpoint: str = Field(min_length=1, description="function, command line, file path or URL path")
    field_path: str = Field(default="$", description="where in the parsed answer the value sits")
    parser: str = Field(pattern=r"^[a-z0-9_]+@[0-9]+$", description="parser name@version")
    normalizer: str = Field(pattern=r"^[a-z0-9_]+@[0-9]+$", description="normalizer name@version")
    shape: ShapeCheck = ShapeCheck(parse="text")


class Tolerance(StrictFrozen):
    relative_percent: int | None = Field(default=None, ge=0, le=1000)
    absolute: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one(self) -> Tolerance:
        if self.relative_percent is None and self.absolute is None:
            raise ValueError("a tolerance needs relative_percent or absolute")
        return self


class Factor(StrictFrozen):
    id: Ident
    definition: str = Field(min_length=1)
    source: Ident = Field(description="id of a [[sources]] contract")
    type: Literal["integer", "number", "string"]
    unit: str = Field(min_length=1)
    normalization: str = Field(min_length=1, description="e.g. identity, lower, major_minor")
    match: Literal["exact", "class", "tolerance"]
    classes: dict[str, list[str]] | None = Field(
        default=None, description="for match=class: class name -> set of normalized values"
    )
    tolerance: Tolerance | None = None
    overhead_pair_tolerance: Tolerance | None = Field(
        default=None, description="stricter tolerance for baseline/faulted overhead pairs"
    )
    required: bool = True
    on_missing_or_drift: Literal["fail_closed", "record_only"] = "fail_closed"

    @model_validator(mode="after")
    def _rule_complete(self) -> Factor:
        if self.match == "tolerance" and self.tolerance is None:
            raise ValueError("match = 'tolerance' needs a [tolerance] table")
        if self.match == "class" and not self.classes:
            raise ValueError("match = 'class' needs a classes table")
        if self.required and self.on_missing_or_drift != "fail_closed":
            raise ValueError("a required factor must fail closed")
        if self.classes:
            object.__setattr__(
                self,
                "classes",
                {k: _unique_sorted(list(v), "class value") for k, v in self.classes.items()},
            )
        return self


# -------------------------------------------------------------------------------------- the spec


class MatrixSection(StrictFrozen):
    baseline: bool = Field(default=True, description="include fault 'none' cells for overhead")
    seeds: list[SafeInt] = Field(min_length=1, description="set")
    replicates: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="runs of every cell (own slots, same schedule); absent = 1",
    )

    @field_validator("seeds")
    @classmethod
    def _seeds_set(cls, v: list[int]) -> list[int]:
        return _unique_sorted(v, "seed")

    @model_serializer(mode="wrap")
    def _absent_when_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _drop_none(handler(self), ("replicates",))


class Spec(StrictFrozen):
    schema_version: Literal["afb.spec/1"] = Field(alias="schema", default="afb.spec/1")
    protocol: ProtocolSection
    tools: list[Tool] = Field(min_length=1, description="set, keyed by name")
    task_sets: list[TaskSet] = Field(min_length=1, description="set, keyed by id")
    subjects: list[Subject] = Field(min_length=1, description="set, keyed by id")
    faults: list[Fault] = Field(default_factory=list, description="set, keyed by id")
    matrix: MatrixSection
    attempts: AttemptPolicy
    eligibility: Eligibility = Eligibility()
    scoring: Scoring
    comparison: Comparison = Comparison()
    publication: Publication = Publication()
    grader: Grader
    sources: list[SourceContract] = Field(default_factory=list, description="set, keyed by id")
    factors: list[Factor] = Field(default_factory=list, description="set, keyed by id")

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    @model_validator(mode="after")
    def _cross_references(self) -> Spec:
        _unique_ids([t.name for t in self.tools], "tools", "tool name")
        _unique_ids([s.id for s in self.task_sets], "task_sets", "task set id")
        _unique_task_ids(self.task_sets)
        for si, ts in enumerate(self.task_sets):
            for ti, t in enumerate(ts.tasks):
                if t.bucket not in ts.buckets:
                    raise LocatedError(
                        ("task_sets", si, "tasks", ti, "bucket"),
                        f"bucket {t.bucket!r} of task {t.id!r} is not declared; expected one of "
                        f"this task set's buckets {ts.buckets}",
                    )
        _unique_ids([s.id for s in self.subjects], "subjects", "subject id")
        _unique_ids([f.id for f in self.faults], "faults", "fault id")
        _unique_ids([s.id for s in self.sources], "sources", "source id")
        _unique_ids([f.id for f in self.factors], "factors", "factor id")
        tool_names = {t.name for t in self.tools}
        set_ids = {s.id for s in self.task_sets}
        buckets = {b for s in self.task_sets for b in s.buckets}
        for i, f in enumerate(self.faults):
            if f.trigger.tool not in ("*", MODEL_TOOL) and f.trigger.tool not in tool_names:
                raise LocatedError(
                    ("faults", i, "trigger", "tool"),
                    f"unknown tool {f.trigger.tool!r}; declared tools: {sorted(tool_names)} "
                    f"(and {MODEL_TOOL!r}: a subject's model calls through the model proxy)",
                )
            for s in f.applies_to.task_sets or []:
                if s not in set_ids:
                    raise LocatedError(
                        ("faults", i, "applies_to", "task_sets"), f"unknown task set {s!r}"
                    )
            for b in f.applies_to.buckets or []:
                if b not in buckets:
                    raise LocatedError(
                        ("faults", i, "applies_to", "buckets"), f"unknown bucket {b!r}"
                    )
        _no_duplicate_cells(self)
        source_ids = {s.id for s in self.sources}
        for i, fac in enumerate(self.factors):
            if fac.source not in source_ids:
                raise LocatedError(
                    ("factors", i, "source"),
                    f"unknown source {fac.source!r}; declared sources: {sorted(source_ids)}",
                )
        return self

    def task_index(self) -> dict[str, tuple[TaskSet, Task]]:
        return {t.id: (s, t) for s in self.task_sets for t in s.tasks}


def _unique_ids(ids: list[str], where: str, what: str) -> None:
    seen: set[str] = set()
    for i, v in enumerate(ids):
        if v in seen:
            raise LocatedError((where, i), f"duplicate {what} {v!r}")
        seen.add(v)


def _unique_task_ids(task_sets: list[TaskSet]) -> None:
    seen: dict[str, tuple[int, int]] = {}
    for si, s in enumerate(task_sets):
        for ti, t in enumerate(s.tasks):
            if t.id in seen:
                a, b = seen[t.id]
                raise LocatedError(
                    ("task_sets", si, "tasks", ti),
                    f"duplicate task id {t.id!r} (also task_sets[{a}].tasks[{b}]); "
                    "task ids are unique across all task sets",
                )
            seen[t.id] = (si, ti)


def _no_duplicate_cells(spec: Spec) -> None:
    """Two faults with one schedule, or two subjects with one agent+config, are one cell twice."""
    schedules: dict[bytes, str] = {}
    for i, f in enumerate(spec.faults):
        key = canonical_bytes(
            {"kind": f.kind, "trigger": f.trigger.model_dump(mode="json"), "p": f.parameters}
        )
        if key in schedules:
            raise LocatedError(
                ("faults", i),
                f"duplicate cells: fault {f.id!r} has the same kind, trigger and parameters as "
                f"fault {schedules[key]!r}",
            )
        schedules[key] = f.id
    configs: dict[bytes, str] = {}
    for i, s in enumerate(spec.subjects):
        key = canonical_bytes({"agent": s.agent, "config": s.config})
        if key in configs:
            raise LocatedError(
                ("subjects", i),
                f"duplicate cells: subject {s.id!r} has the same agent and config as "
                f"subject {configs[key]!r}",
            )
        configs[key] = s.id


class LocatedError(ValueError):
    """A cross-reference error that names the key it is about (specload points at its line)."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        self.loc = loc
        super().__init__(message)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]
