"""tau-lite as a runtime `Workload` (views, routes, grader) and the per-attempt destination.

What the runtime's `Workload` protocol asks, implemented: the agent and oracle views
(agentview), the prompt, the oracle subject (subjects/reference.py), the effect routes (each
write tool is `POST /effects/<tool>` at the destination, so the egress proxy names the call by
its tool), and a grader that reads only the destination's ledger through
`GradeContext.read_ledger` (the final state is the last commit's `state_after`). Not yet
registered: the attempt still starts the runtime's own destination, so `destination(...)` (the
store copied from the task's pristine domain, served by `TauDestination`) waits for a runtime
seam that lets a workload supply it (docs/TAU-LITE.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runner.benchmarks.tau_lite import agentview, domains, tasks, wheel
from runner.benchmarks.tau_lite.grade import final_state, grade_ledger
from runner.benchmarks.tau_lite.service import TauDestination
from runner.benchmarks.tau_lite.store import Store
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.spec import Spec
from runner.runtime.attempt.api import GradeContext, GradeOutcome

ORACLE_SUBJECT = Path(__file__).resolve().parent / "subjects" / "reference.py"


class TauLiteWorkload:
    """The tasks of both domains (ids `airline-<n>`, `retail-<n>`), built from the pinned wheel."""

    def __init__(
        self,
        sets: Mapping[str, tasks.DomainSet],
        docs: Mapping[str, Mapping[str, str]],
        image: str,
        task_ids: list[str] | None = None,
    ) -> None:
        self._sets = dict(sets)
        self._docs = {d: dict(v) for d, v in docs.items()}
        self._image = image
        self._tasks = {t.id: t for s in sets.values() for t in s.tasks.values()}
        unknown = sorted(set(task_ids or []) - set(self._tasks))
        if unknown:
            excluded = {t: why for s in sets.values() for t, why in s.excluded.items()}
            named = [f"{t} ({excluded.get(t, 'no such task')})" for t in unknown]
            raise ValueError(f"tau-lite: not a kept task: {', '.join(named)}")

    @classmethod
    def build(
        cls,
        image: str,
        task_ids: list[str] | None = None,
        wheel_path: Path | None = None,
        workdir: Path | None = None,
    ) -> TauLiteWorkload:
        path = wheel.verify(wheel_path) if wheel_path else wheel.fetch()
        sets = tasks.build(path, workdir)  # a fresh temporary folder when None
        docs = {d: tasks.tool_docs(path, d) for d in wheel.DOMAINS}
        return cls(sets, docs, image, task_ids)

    @classmethod
    def from_spec(cls, spec: Spec, base: Path) -> TauLiteWorkload:
        """The spec's tasks (ids `airline-<n>` / `retail-<n>`, no `path`), its `[grader].image`
        (required: the attempt still creates a sandbox), and the write tools it declares, which
        must be exactly the domains' (irreversible, each)."""
        if spec.grader.image is None:
            raise InputError(
                "tau-lite needs [grader].image (the attempt's sandbox)",
                file=str(base),
                key="grader.image",
            )
        declared = {t.name for t in spec.tools if t.irreversible}
        writes = {n for d in wheel.DOMAINS for n in domains.write_tools(d)}
        if declared != writes:
            raise InputError(
                f"the irreversible [[tools]] must be tau-lite's write tools: missing "
                f"{sorted(writes - declared)}, not write tools {sorted(declared - writes)}",
                file=str(base),
                key="tools",
            )
        try:
            return cls.build(spec.grader.image, sorted(spec.task_index()))
        except (ValueError, wheel.WheelError) as exc:
            raise InputError(str(exc), file=str(base), key="task_sets") from None

    def task(self, task_id: str) -> tasks.TauTask:
        return self._tasks[task_id]

    @property
    def image(self) -> str:
        return self._image

    def agent_task(self, task_id: str) -> Mapping[str, Any]:
        t = self._tasks[task_id]
        return agentview.agent_task(t, self._sets[t.domain].policy, self._docs[t.domain])

    def oracle_task(self, task_id: str) -> Mapping[str, Any]:
        t = self._tasks[task_id]
        return agentview.oracle_task(t, self._sets[t.domain].policy, self._docs[t.domain])

    def agent_prompt(self, task_id: str, status_command: str | None = None) -> str:
        return agentview.agent_prompt(self.agent_task(task_id), status_command)

    @property
    def effect_routes(self) -> Mapping[tuple[str, str], str]:
        return {("POST", f"/effects/{n}"): n for d in wheel.DOMAINS for n in domains.write_tools(d)}

    @property
    def oracle_subject(self) -> Path:
        """The four strategies (stdlib, `reference:<strategy>` subjects launch it)."""
        return ORACLE_SUBJECT

    def destination(
        self, task_id: str, store_path: Path, *, idempotency_keys: bool = False
    ) -> TauDestination:
        """The attempt's destination: a fresh copy of the task's pristine domain, served."""
        pristine = Store(self._sets[self._tasks[task_id].domain].pristine)
        try:
            pristine.copy_to(store_path).close()
        finally:
            pristine.close()
        return TauDestination(store_path, idempotency_keys=idempotency_keys)

    def grader(self, task_id: str) -> Callable[[GradeContext], GradeOutcome]:
        task = self._tasks[task_id]
        pristine_hash = self._sets[task.domain].pristine_hash
        intended = sum(task.expected_intents.values())

        def grade(ctx: GradeContext) -> GradeOutcome:
            items, failures = ctx.read_ledger(ctx.scope)
            if items is None:
                return GradeOutcome(False, intended, 0, shape_ok=False, shape_failures=failures)
            rows = sorted(items, key=lambda i: int(i.get("seq", 0)))
            g = grade_ledger(rows, task, final_state(rows, pristine_hash))
            return GradeOutcome(
                g.completed,
                g.intended_effects,
                g.committed_effects,
                shape_ok=True,
                report=g.as_json(),
            )

        return grade
