"""What the runtime needs of a benchmark: a `Workload`, handed to the executor.

The runtime knows no benchmark (it never imports runner.benchmarks). A benchmark implements
this protocol (runner/benchmarks/swe_lite/ is the first) and the orchestration layer picks one
by the spec's grader id (`runner.benchmarks.registry.workload_for`). Per task, a workload says
what a subject is told about the task (the subject adapter turns that into an argv), and how
an attempt is graded; per run, which sandbox image its attempts use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from runner.runtime.attempt.api import GradeContext, GradeOutcome

Grade = Callable[[GradeContext], GradeOutcome]


class Workload(Protocol):
    @property
    def image(self) -> str:
        """The sandbox image: a folder name under the checkout's images/ (declared inputs)."""
        ...

    def subject_task(self, task_id: str) -> Mapping[str, Any]:
        """The task as a subject is given it (JSON-able; part of the subject's argv)."""
        ...

    def grader(self, task_id: str) -> Grade:
        """How an attempt at this task is graded (from the destination's state, never a claim)."""
        ...
