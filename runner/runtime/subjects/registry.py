"""Which adapter launches each `[[subjects]].agent`: one registration per adapter, by its module.

An agent is `<adapter>:<name>`; the part before ':' picks the adapter. Every module of this
package but the shared ones is an adapter and is imported on first use, so a new adapter is one
new module calling `register_adapter` (fault kinds are found the same way,
runner/runtime/faults/registry.py). Every subject of a spec is resolved before any cell runs, so
an unknown adapter, a bad config, an environment that does not build or a missing/malformed
cassette is an input error (exit 2) naming the file and entry, never a harness error mid-run.

Only `reference:` subjects are oracles (runner/evaluator/protocol/subjects.py `subject_role`,
an evaluator decision); every other adapter hands its subject the workload's agent view only,
and a non-oracle subject that asks for the oracle view is an input error.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol.spec import Spec, Subject
from runner.evaluator.protocol.specload import spec_base
from runner.evaluator.protocol.subjects import subject_role
from runner.runtime.attempt.api import SubjectCommand
from runner.runtime.workload import TaskViews, Workload

M = TypeVar("M", bound=BaseModel)

# the task's views (agent; oracle for oracles only) -> the command of one attempt
Launch = Callable[[TaskViews], SubjectCommand]
# The oracle's own channel: a file named by this variable (its state directory is its own, its
# environment unreadable to other uids). Never AFB_TASK_FILE, never argv: /proc/<pid>/cmdline is
# readable by every local user, so an agent running beside an oracle could read it there.
ORACLE_CHANNEL = "AFB_ORACLE_FILE"

# modules of this package that are not adapters
_NOT_ADAPTERS = {"config", "environment", "model", "registry", "tree"}


@dataclass(frozen=True)
class ResolveContext:
    """What an adapter may look at while resolving: the spec, where it lives, the checkout."""

    spec: Spec
    spec_path: Path
    root: Path
    workload: Workload | None = None  # what the oracle adapter asks for its subject's script

    @property
    def base(self) -> Path:
        return spec_base(self.spec_path)

    def task_ids(self) -> list[str]:
        return sorted(self.spec.task_index())


class SubjectAdapter(Protocol):
    @property
    def config(self) -> type[BaseModel]:
        """The adapter's config grammar (its JSON Schema: subject-<prefix>-config)."""
        ...

    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:
        """Check the subject's config (raise InputError) and return how to launch it."""
        ...


_ADAPTERS: dict[str, SubjectAdapter] = {}
_discovered = False


def register_adapter(prefix: str, adapter: SubjectAdapter) -> None:
    if not prefix or ":" in prefix:
        raise ValueError(f"invalid adapter prefix {prefix!r}")
    _ADAPTERS[prefix] = adapter


def unregister_adapter(prefix: str) -> None:
    _ADAPTERS.pop(prefix, None)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import runner.runtime.subjects as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in _NOT_ADAPTERS:
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    _discovered = True


def registered_adapters() -> tuple[str, ...]:
    _discover()
    return tuple(sorted(_ADAPTERS))


def adapter_for(prefix: str) -> SubjectAdapter | None:
    _discover()
    return _ADAPTERS.get(prefix)


def config_models() -> dict[str, type[BaseModel]]:
    """Adapter prefix -> its config model, for the JSON Schemas."""
    _discover()
    return {prefix: a.config for prefix, a in sorted(_ADAPTERS.items())}


def _oracle_request(subject: Subject) -> str | None:
    """The config key by which a non-oracle subject asks for the oracle view, if it does: a key
    naming it, an env variable naming it, or an argv/env value using its channel."""
    for key, value in subject.config.items():
        names = [key, *(value if isinstance(value, dict) else {})]
        values = value if isinstance(value, list) else list(value.values()) if isinstance(
            value, dict) else [value]  # fmt: skip
        if any("oracle" in n.lower() for n in names if isinstance(n, str)) or any(
            isinstance(t, str) and ("--oracle" in t or ORACLE_CHANNEL in t or "{oracle}" in t)
            for t in values
        ):
            return key
    return None


def _adapter_of(spec_path: Path, i: int, s: Subject) -> SubjectAdapter:
    asked = _oracle_request(s) if subject_role(s.agent) != "oracle" else None
    if asked is not None:
        raise InputError(
            f"subject {s.id!r} ({s.agent}) asks for the oracle view of the task: only "
            "'reference:' subjects (the oracles) get the known answer; every other subject "
            "is an agent and gets the agent view (AFB_TASK_FILE)",
            file=str(spec_path),
            key=f"subjects[{i}].config.{asked}",
        )
    prefix, sep, _ = s.agent.partition(":")
    adapter = adapter_for(prefix) if sep else None
    if adapter is None:
        raise InputError(
            f"subject {s.id!r}: no subject adapter for agent {s.agent!r}; registered "
            f"adapters: {[f'{p}:' for p in registered_adapters()]}",
            file=str(spec_path),
        )
    return adapter


def _located(exc: InputError, s: Subject, spec_path: Path, i: int) -> InputError:
    """An adapter's InputError, named by the spec's file and key (or the other file it is about)."""
    if exc.file is not None:  # about another file (a cassette, a lock): keep it
        return InputError(f"subject {s.id!r}: {exc.message}", file=exc.file, key=exc.key)
    key = f"subjects[{i}].config" + (f".{exc.key}" if exc.key else "")
    return InputError(exc.message, file=str(spec_path), key=key)


def check_subject_configs(spec: Spec, spec_path: Path) -> None:
    """Every subject's adapter exists and its config parses as that adapter's grammar (no file
    read, nothing built): what `bench plan` checks; the first problem is an InputError."""
    for i, s in enumerate(spec.subjects):
        adapter = _adapter_of(spec_path, i, s)
        try:
            typed_config(s, adapter.config)
        except InputError as exc:
            raise _located(exc, s, spec_path, i) from None


def resolve_subjects(
    spec: Spec, spec_path: Path, workload: Workload | None = None
) -> dict[str, Launch]:
    """Every subject of the spec, by id; the first unresolvable one is an InputError."""
    out: dict[str, Launch] = {}
    ctx = ResolveContext(spec, spec_path, project_root(), workload)
    for i, s in enumerate(spec.subjects):
        adapter = _adapter_of(spec_path, i, s)
        try:
            out[s.id] = adapter.resolve(s, ctx)
        except InputError as exc:
            raise _located(exc, s, spec_path, i) from None
    return out


def typed_config(subject: Subject, model: type[M]) -> M:
    """The subject's config as its adapter's model; the first problem is an InputError."""
    try:
        return model.model_validate(subject.config)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(
            f"subject {subject.id!r} ({subject.agent}): {err['msg']}", key=loc or None
        ) from None
