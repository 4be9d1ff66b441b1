"""swe-lite grading wired into attempts: grade the destination's state, never the subject's claim.

Completion = the first patch the destination accepted for the attempt's scope (read through the
shape-checked ledger query), applied to pristine sources in a fresh sandbox, passes the task's
FAIL_TO_PASS and PASS_TO_PASS tests. Duplicate effects = committed - intended, from the same read.
A grade is a pure function of (task, patch, image), so one run caches it per (task, patch).
`SweLiteWorkload` is what the runtime sees of all this (`runner.runtime.workload.Workload`): the
task views of `agentview` (agent / oracle), the submit route, the oracle subject's script.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.benchmarks.swe_lite import agentview
from runner.benchmarks.swe_lite.agentview import SANDBOX_SRC
from runner.benchmarks.swe_lite.grade import GradeReport, Task, grade, load_task
from runner.evaluator.protocol.spec import Spec
from runner.runtime.attempt.api import GradeContext, GradeOutcome
from runner.runtime.sandbox.base import Sandbox

DEFAULT_IMAGE = "swe-lite"  # when the spec's [grader] names no image
# The reference strategies, run as a subject (stdlib only, by the system python3): the oracles.
ORACLE_SUBJECT = Path(__file__).resolve().parent / "subjects" / "reference.py"


def _exec_fn(sandbox: Sandbox) -> Callable[[Sequence[str], bytes], tuple[int, bytes, bytes]]:
    def run(argv: Sequence[str], stdin: bytes) -> tuple[int, bytes, bytes]:
        r = sandbox.exec(list(argv), stdin=stdin, timeout=600.0)
        return r.exit_code, r.stdout, r.stderr

    return run


class SweLiteGrader:
    def __init__(self, task_dirs: dict[str, Path]) -> None:
        self.tasks = {tid: load_task(d) for tid, d in task_dirs.items()}
        self._cache: dict[tuple[str, str], GradeReport] = {}
        self._lock = threading.Lock()

    def for_task(self, task_id: str) -> Callable[[GradeContext], GradeOutcome]:
        task = self.tasks[task_id]
        return lambda ctx: self._grade(task, ctx)

    def _grade(self, task: Task, ctx: GradeContext) -> GradeOutcome:
        items, failures = ctx.read_ledger(ctx.scope)
        if items is None:
            return GradeOutcome(False, 1, 0, shape_ok=False, shape_failures=list(failures))
        accepted = sorted(items, key=lambda i: int(i.get("seq", 0)))
        patches = [i.get("payload", {}).get("patch") for i in accepted]
        if not accepted or not isinstance(patches[0], str):
            why = {"reason": "no accepted patch", "effects": len(accepted)}
            return GradeOutcome(False, 1, len(accepted), shape_ok=True, report=why)
        patch = patches[0].encode()
        key = (task.id, hashlib.sha256(patch).hexdigest())
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            with ctx.fresh_sandbox() as sandbox:
                cached = grade(_exec_fn(sandbox), task, patch, src_root=SANDBOX_SRC)
            with self._lock:
                self._cache[key] = cached
        report = {
            **cached.as_json(),
            "patch_sha256": key[1],
            "effects": [
                {"effect_id": i.get("effect_id"), "seq": i.get("seq"),
                 "idempotency_key": i.get("idempotency_key")}
                for i in accepted
            ],
            "distinct_patches": len(set(p for p in patches if isinstance(p, str))),
        }  # fmt: skip
        return GradeOutcome(
            completed=cached.resolved,
            intended_effects=1,
            committed_effects=len(accepted),
            shape_ok=True,
            report=report,
        )


class SweLiteWorkload:
    """The swe-lite benchmark as a runtime `Workload`: its tasks, its grader, its image."""

    def __init__(
        self,
        task_dirs: dict[str, Path],
        image: str = DEFAULT_IMAGE,
        tools: Sequence[Any] | None = None,
    ) -> None:
        self._grader = SweLiteGrader(task_dirs)
        self._image = image
        self._tools = list(tools) if tools else None  # the spec's [[tools]], as agents see them

    @classmethod
    def from_spec(cls, spec: Spec, base: Path) -> SweLiteWorkload:
        """Tasks with a `path` (relative to the spec's folder); the image from `[grader]`."""
        task_dirs = {
            tid: base / t.path for tid, (_, t) in spec.task_index().items() if t.path is not None
        }
        return cls(task_dirs, spec.grader.image or DEFAULT_IMAGE, spec.tools)

    @property
    def image(self) -> str:
        return self._image

    def agent_task(self, task_id: str) -> Mapping[str, Any]:
        return agentview.agent_task(self._grader.tasks[task_id], self._tools)

    def oracle_task(self, task_id: str) -> Mapping[str, Any]:
        return agentview.oracle_task(self._grader.tasks[task_id], self._tools)

    def agent_prompt(self, task_id: str, status_command: str | None = None) -> str:
        return agentview.agent_prompt(self.agent_task(task_id), status_command)

    @property
    def effect_routes(self) -> Mapping[tuple[str, str], str]:
        return dict(agentview.EFFECT_ROUTES)

    @property
    def oracle_subject(self) -> Path:
        return ORACLE_SUBJECT

    def grader(self, task_id: str) -> Callable[[GradeContext], GradeOutcome]:
        return self._grader.for_task(task_id)
