"""Subject adapters: a spec's `[[subjects]].agent` (+ config) -> the command that launches it.

An agent is `<adapter>:<name>`; the part before ':' picks the adapter from a registry
(`register_adapter`). Every subject of a spec is resolved before any cell runs, so an unknown
adapter or a bad config is an input error (exit 2), never a harness error mid-run. `reference:`
is the first adapter: the deterministic reference strategies of runner/subjects/reference.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol.spec import Spec, Subject
from runner.runtime.attempt.api import SubjectCommand
from runner.runtime.host import paths

# task (as the workload describes it to subjects) -> the command of one attempt
Launch = Callable[[Mapping[str, Any]], SubjectCommand]


class SubjectAdapter(Protocol):
    def resolve(self, subject: Subject) -> Launch:
        """Check the subject's config (raise InputError) and return how to launch it."""
        ...


_ADAPTERS: dict[str, SubjectAdapter] = {}


def register_adapter(prefix: str, adapter: SubjectAdapter) -> None:
    if not prefix or ":" in prefix:
        raise ValueError(f"invalid adapter prefix {prefix!r}")
    _ADAPTERS[prefix] = adapter


def unregister_adapter(prefix: str) -> None:
    _ADAPTERS.pop(prefix, None)


def registered_adapters() -> tuple[str, ...]:
    return tuple(sorted(_ADAPTERS))


def resolve_subjects(spec: Spec, spec_path: Path) -> dict[str, Launch]:
    """Every subject of the spec, by id; the first unresolvable one is an InputError."""
    out: dict[str, Launch] = {}
    for s in spec.subjects:
        prefix, sep, _ = s.agent.partition(":")
        adapter = _ADAPTERS.get(prefix) if sep else None
        if adapter is None:
            raise InputError(
                f"subject {s.id!r}: no subject adapter for agent {s.agent!r}; registered "
                f"adapters: {[f'{p}:' for p in registered_adapters()]}",
                file=str(spec_path),
            )
        try:
            out[s.id] = adapter.resolve(s)
        except InputError as exc:
            raise InputError(exc.message, file=str(spec_path), key=exc.key) from None
    return out


# ------------------------------------------------------------------------ reference: adapter


class ReferenceAdapter:
    """`reference:<strategy>` with `config.strategy`: runner/subjects/reference.py as `nobody`."""

    script = project_root() / "runner" / "subjects" / "reference.py"

    def resolve(self, subject: Subject) -> Launch:
        if "strategy" not in subject.config:
            raise InputError(
                f"subject {subject.id!r}: a reference subject (agent = 'reference:...') needs "
                "config.strategy"
            )
        strategy = str(subject.config["strategy"])
        script = str(self.public_script())

        def launch(task: Mapping[str, Any]) -> SubjectCommand:
            argv = [
                "/usr/bin/python3", script,
                "--strategy", strategy,
                "--task-json", json.dumps(task, sort_keys=True),
            ]  # fmt: skip
            return SubjectCommand(argv=argv)

        return launch

    def public_script(self) -> Path:
        """Copy the reference subject somewhere `nobody` can read it, named by its content."""
        data = self.script.read_bytes()
        public = paths.SUBJECTS_PUBLIC_DIR
        target = public / f"reference-{hashlib.sha256(data).hexdigest()[:16]}.py"
        if not target.exists():
            public.mkdir(parents=True, exist_ok=True)
            os.chmod(public.parent, 0o755)
            os.chmod(public, 0o755)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, 0o644)
            tmp.replace(target)
        return target


register_adapter("reference", ReferenceAdapter())
