"""The spec language: a declarative TOML file parsed into frozen, `extra="forbid"` pydantic models.

Arrays are either *sets* (order carries no meaning; they are sorted before hashing, and duplicates
are an error) or *sequences* (order is meaning and is hashed as written). Each field says which in
its description; docs/SPEC.md lists them all. Reordering a set or the TOML tables never changes a
hash.
"""

from __future__ import annotations

import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .canonical import MAX_SAFE_INTEGER, CanonicalError, canonical_bytes
from .errors import InputError
from .inputs import project_root

SPEC_SCHEMA_VERSION = "afb.spec/1"
Ident = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultKind(StrEnum):
    NONE = "none"
    SANDBOX_RESTART = "sandbox_restart"
    LOST_RESPONSE = "lost_response"
    SIGKILL_MID_TOOL_CALL = "sigkill_mid_tool_call"
    NETWORK_PARTITION = "network_partition"


INJECTED_KINDS = tuple(k for k in FaultKind if k is not FaultKind.NONE)


class Phase(StrEnum):
    """Points in one tool call's life at the interposer; triggers fire at exactly one of these."""

    RECEIVED = "received"
    DISPATCHED = "dispatched"
    EFFECT_DONE = "effect_done"
    RESPONSE_SENT = "response_sent"


class Status(StrEnum):
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBJECT_PRE_TRIGGER_FAILURE = "SUBJECT_PRE_TRIGGER_FAILURE"
    SCENARIO_MISMATCH = "SCENARIO_MISMATCH"
    INVALID_INJECTION = "INVALID_INJECTION"
    HARNESS_INVALID = "HARNESS_INVALID"


RETRYABLE = frozenset({Status.INVALID_INJECTION, Status.HARNESS_INVALID})


def _unique_sorted(values: list[Any], what: str) -> list[Any]:
    seen = set()
    for v in values:
        if v in seen:
            raise ValueError(f"duplicate {what} {v!r} (this array is a set)")
        seen.add(v)
    return sorted(values)


# ---------------------------------------------------------------- protocol, tools, tasks, subjects


class ProtocolSection(Frozen):
    id: Ident
    version: str = Field(min_length=1, max_length=64)
    description: str = ""


class Tool(Frozen):
    name: Ident
    irreversible: bool = False
    description: str = ""


class Task(Frozen):
    id: Ident
    bucket: Ident
    path: str | None = Field(
        default=None, description="Task folder, relative to the spec's folder; must stay inside it."
    )


class TaskSet(Frozen):
    id: Ident
    buckets: list[Ident] = Field(description="set: the buckets tasks of this set may declare")
    tasks: list[Task] = Field(min_length=1, description="set, keyed by task id")

    @field_validator("buckets")
    @classmethod
    def _buckets_set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "bucket")

    @model_validator(mode="after")
    def _bucket_declared(self) -> TaskSet:
        for i, t in enumerate(self.tasks):
            if t.bucket not in self.buckets:
                raise ValueError(
                    f"tasks[{i}] ({t.id}): bucket {t.bucket!r} is not one of {self.buckets}"
                )
        return self


JsonValue = Any


class Subject(Frozen):
    id: Ident
    agent: str = Field(
        min_length=1, description="entry point of the agent, e.g. reference:idempotency_key"
    )
    config: dict[str, JsonValue] = Field(default_factory=dict)


# ------------------------------------------------------------------------------- faults, triggers


class Trigger(Frozen):
    """A benchmark-owned semantic checkpoint; never a wall-clock offset."""

    event: Literal["tool_call"] = "tool_call"
    tool: str = Field(description="the tool name the trigger selects, or '*' for any tool")
    ordinal: int = Field(ge=1, le=10_000, description="the Nth matching call (1-based)")
    phase: Phase


class RestartParams(Frozen):
    mode: Literal["restart", "recreate"] = "restart"


class LostResponseParams(Frozen):
    endpoint: Literal["destination"] = "destination"


class SigkillParams(Frozen):
    target: Literal["subject"] = "subject"


class PartitionParams(Frozen):
    endpoint: Literal["destination"] = "destination"
    control: Literal["interposer"] = "interposer"
    release_after_blocked_attempts: int = Field(
        default=1,
        ge=1,
        le=100,
        description="release once the drop rule counted this many blocked connection attempts",
    )


_PARAMS: dict[FaultKind, type[Frozen]] = {
    FaultKind.SANDBOX_RESTART: RestartParams,
    FaultKind.LOST_RESPONSE: LostResponseParams,
    FaultKind.SIGKILL_MID_TOOL_CALL: SigkillParams,
    FaultKind.NETWORK_PARTITION: PartitionParams,
}


class Applicability(Frozen):
    task_sets: list[Ident] | None = Field(default=None, description="set; None = all")
    buckets: list[Ident] | None = Field(default=None, description="set; None = all")


class Fault(Frozen):
    id: Ident
    kind: FaultKind
    trigger: Trigger
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    applies_to: Applicability = Applicability()

    @model_validator(mode="after")
    def _typed_parameters(self) -> Fault:
        if self.kind is FaultKind.NONE:
            raise ValueError("kind 'none' is implicit (baseline cells); do not declare it")
        # Validate against the kind's parameter model and store the fully-defaulted form, so
        # writing a default explicitly or leaving it out hashes the same.
        model = _PARAMS[self.kind]
        try:
            typed = model.model_validate(self.parameters)
        except ValidationError as exc:
            raise ValueError(f"parameters for {self.kind.value}: {_first_error(exc)}") from exc
        object.__setattr__(self, "parameters", typed.model_dump(mode="json"))
        return self


# ---------------------------------------------------------------------------------------- policy


class AttemptPolicy(Frozen):
    cap: int = Field(ge=1, le=20, description="attempts per cell, fixed in advance")
    retry_on: list[Status] = Field(
        default_factory=lambda: [Status.HARNESS_INVALID, Status.INVALID_INJECTION],
        description="set: only INVALID_INJECTION and HARNESS_INVALID may be retried",
    )

    @field_validator("retry_on")
    @classmethod
    def _only_invalid(cls, v: list[Status]) -> list[Status]:
        for s in v:
            if s not in RETRYABLE:
                raise ValueError(
                    f"{s.value} is a subject outcome and is final; it cannot be retried"
                )
        return _unique_sorted(v, "status")


class Eligibility(Frozen):
    witnessed_coverage_floor_percent: int = Field(
        default=100, ge=1, le=100, description="applies overall and in every stratum"
    )
    strata: list[Literal["fault_kind", "task_bucket"]] = Field(
        default_factory=lambda: ["fault_kind", "task_bucket"], description="set"
    )
    require_frozen: bool = True
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


class Scoring(Frozen):
    scorer_version: str = Field(min_length=1, max_length=32)
    measures: list[Literal["completion", "duplicate_effects", "recovery_overhead"]] = Field(
        description="set"
    )
    overhead_baseline: Literal["same_task_subject_seed"] = "same_task_subject_seed"
    aggregation: Literal["per_subject_and_stratum"] = "per_subject_and_stratum"

    @field_validator("measures")
    @classmethod
    def _measures_set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "measure")


class Comparison(Frozen):
    require_equal: list[Literal["protocol_hash", "cell_set_hash"]] = Field(
        default_factory=lambda: ["cell_set_hash", "protocol_hash"], description="set"
    )
    require_distinct_subjects: bool = True
    require_environment_conformance: bool = True

    @field_validator("require_equal")
    @classmethod
    def _set(cls, v: list[str]) -> list[str]:
        return _unique_sorted(v, "field")


class Publication(Frozen):
    require_frozen: bool = True
    outputs: list[Literal["json", "markdown"]] = Field(
        default_factory=lambda: ["json", "markdown"], description="set"
    )


class Grader(Frozen):
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


class ShapeCheck(Frozen):
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


class SourceContract(Frozen):
    """A typed, content-addressed source: where a value comes from and how it is read."""

    id: Ident
    provider: Literal["python", "command", "file", "http", "podman", "evaluator"]
    endpoint: str = Field(min_length=1, description="function, command line, file path or URL path")
    field_path: str = Field(default="$", description="where in the parsed answer the value sits")
    parser: str = Field(pattern=r"^[a-z0-9_]+@[0-9]+$", description="parser name@version")
    normalizer: str = Field(pattern=r"^[a-z0-9_]+@[0-9]+$", description="normalizer name@version")
    shape: ShapeCheck = ShapeCheck(parse="text")


class Tolerance(Frozen):
    relative_percent: int | None = Field(default=None, ge=0, le=1000)
    absolute: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one(self) -> Tolerance:
        if self.relative_percent is None and self.absolute is None:
            raise ValueError("a tolerance needs relative_percent or absolute")
        return self


class Factor(Frozen):
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


class MatrixSection(Frozen):
    baseline: bool = Field(default=True, description="include fault 'none' cells for overhead")
    seeds: list[SafeInt] = Field(min_length=1, description="set")

    @field_validator("seeds")
    @classmethod
    def _seeds_set(cls, v: list[int]) -> list[int]:
        return _unique_sorted(v, "seed")


class Spec(Frozen):
    schema_version: Literal["afb.spec/1"] = Field(alias="schema", default=SPEC_SCHEMA_VERSION)
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

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _cross_references(self) -> Spec:
        _unique_ids([t.name for t in self.tools], "tools", "tool name")
        _unique_ids([s.id for s in self.task_sets], "task_sets", "task set id")
        _unique_ids([t.id for s in self.task_sets for t in s.tasks], "task_sets.tasks", "task id")
        _unique_ids([s.id for s in self.subjects], "subjects", "subject id")
        _unique_ids([f.id for f in self.faults], "faults", "fault id")
        _unique_ids([s.id for s in self.sources], "sources", "source id")
        _unique_ids([f.id for f in self.factors], "factors", "factor id")
        tool_names = {t.name for t in self.tools}
        set_ids = {s.id for s in self.task_sets}
        buckets = {b for s in self.task_sets for b in s.buckets}
        for i, f in enumerate(self.faults):
            if f.trigger.tool != "*" and f.trigger.tool not in tool_names:
                raise _LocatedError(
                    ("faults", i, "trigger", "tool"),
                    f"unknown tool {f.trigger.tool!r}; declared tools: {sorted(tool_names)}",
                )
            for s in f.applies_to.task_sets or []:
                if s not in set_ids:
                    raise _LocatedError(
                        ("faults", i, "applies_to", "task_sets"), f"unknown task set {s!r}"
                    )
            for b in f.applies_to.buckets or []:
                if b not in buckets:
                    raise _LocatedError(
                        ("faults", i, "applies_to", "buckets"), f"unknown bucket {b!r}"
                    )
        source_ids = {s.id for s in self.sources}
        for i, fac in enumerate(self.factors):
            if fac.source not in source_ids:
                raise _LocatedError(
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
            raise _LocatedError((where, i), f"duplicate {what} {v!r}")
        seen.add(v)


class _LocatedError(ValueError):
    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        self.loc = loc
        super().__init__(message)


# ---------------------------------------------------------------------------------------- loading


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]


def _keypath(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _locate_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort line of a key path in TOML source (tomllib keeps no positions)."""
    lines = text.splitlines()
    start = 0
    table: list[str] = []
    for part in loc:
        if isinstance(part, int):
            header = re.compile(r"^\s*\[\[\s*" + re.escape(".".join(table)) + r"\s*\]\]")
            hits = [i for i, line in enumerate(lines) if i >= start and header.match(line)]
            if len(hits) > part:
                start = hits[part]
            continue
        table.append(str(part))
        key = re.compile(r"^\s*" + re.escape(str(part)) + r"\s*=")
        sub = re.compile(r"^\s*\[+\s*" + re.escape(".".join(table)) + r"\s*\]+")
        for i in range(start, len(lines)):
            if key.match(lines[i]) or sub.match(lines[i]):
                start = i
                break
        else:
            return None
    return start + 1 if loc else None


_TOML_LINE = re.compile(r"at line (\d+)")


def load_spec(path: Path) -> Spec:
    """Parse and validate a spec file; every input mistake becomes an InputError."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read spec: {exc}", file=name) from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        raise InputError(
            f"malformed TOML: {exc}", file=name, line=int(m.group(1)) if m else None
        ) from exc
    try:
        canonical_bytes(_plain(raw))
    except CanonicalError as exc:
        raise InputError(
            str(exc).split(": ", 1)[-1], file=name, key=exc.path.strip("/").replace("/", ".")
        ) from exc
    try:
        spec = Spec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _LocatedError):
            loc = ctx_err.loc
            msg = str(ctx_err)
        else:
            msg = _describe(err)
        more = f" (and {len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
        raise InputError(
            msg + more, file=name, key=_keypath(loc) or None, line=_locate_line(text, loc)
        ) from exc
    _check_paths(spec, path)
    return spec


def _describe(err: Any) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key (not part of the spec language)"
    if kind == "missing":
        return "required key is missing"
    got = err.get("input")
    shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
    return "expected: " + err["msg"].removeprefix("Value error, ") + shown


def _plain(value: Any) -> Any:
    # TOML dates/times have no JSON form: reject them here with the key path, as input errors.
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _check_paths(spec: Spec, spec_path: Path) -> None:
    base = spec_path.resolve().parent
    checks: list[tuple[str, str]] = []
    for si, s in enumerate(spec.task_sets):
        for ti, t in enumerate(s.tasks):
            if t.path is not None:
                checks.append((f"task_sets[{si}].tasks[{ti}].path", t.path))
    for key, rel in checks:
        resolved = (base / rel).resolve()
        if Path(rel).is_absolute() or not resolved.is_relative_to(base):
            raise InputError(
                f"path {rel!r} escapes the spec's folder {base}", file=str(spec_path), key=key
            )
        if not resolved.exists():
            raise InputError(f"path {rel!r} does not exist", file=str(spec_path), key=key)
    root = project_root()
    for i, c in enumerate(spec.grader.code):
        key = f"grader.code[{i}]"
        resolved = (root / c).resolve()
        if Path(c).is_absolute() or not resolved.is_relative_to(root) or not resolved.is_file():
            raise InputError(
                f"grader file {c!r} is not a file inside the checkout {root}",
                file=str(spec_path),
                key=key,
            )
    if spec.grader.image and not (root / "images" / spec.grader.image).is_dir():
        raise InputError(
            f"no image folder images/{spec.grader.image} in the checkout",
            file=str(spec_path),
            key="grader.image",
        )


def spec_base(spec_path: Path) -> Path:
    return spec_path.resolve().parent
