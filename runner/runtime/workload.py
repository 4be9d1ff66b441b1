"""What the runtime needs of a benchmark: a `Workload`, handed to the executor.

The runtime knows no benchmark (it never imports runner.benchmarks). A benchmark implements
this protocol (runner/benchmarks/swe_lite/ is the first) and the orchestration layer picks one
by the spec's grader id (`runner.benchmarks.registry.workload_for`). Per task, a workload says
what a subject is told about the task (the subject adapter turns that into an argv), and how
an attempt is graded; per run, which sandbox image its attempts use.

Two views of a task: the *agent view* (`agent_task`), what every subject sees (its task file
AFB_TASK_FILE, its prompt), never the known answer; and the *oracle view* (`oracle_task`), the
agent view plus the known answer, handed only to `reference:` subjects (the oracles) through
their own channel. `TaskViews` carries both to an adapter; the oracle view is built only when an
oracle adapter asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.runtime.attempt.api import GradeContext, GradeOutcome

Grade = Callable[[GradeContext], GradeOutcome]


class Workload(Protocol):
    @property
    def image(self) -> str:
        """The sandbox image: a folder name under the checkout's images/ (declared inputs)."""
        ...

    def agent_task(self, task_id: str) -> Mapping[str, Any]:
        """The agent view (JSON-able): what every non-oracle subject is told, and nothing of
        the known answer (docs/SUBJECTS.md lists each workload's keys)."""
        ...

    def oracle_task(self, task_id: str) -> Mapping[str, Any]:
        """The oracle view: the agent view plus the known answer (oracle subjects only)."""
        ...

    def agent_prompt(self, task_id: str, status_command: str | None = None) -> str:
        """The agent view as a prompt for an agent acting through shell commands;
        `status_command` is the command that asks the status tool, when the agent has one."""
        ...

    @property
    def effect_routes(self) -> Mapping[tuple[str, str], str]:
        """(method, path) at the destination -> the irreversible tool that request stands for."""
        ...

    @property
    def oracle_subject(self) -> Path | None:
        """The script of the workload's oracle (reference) subjects, None if it has none."""
        ...

    def grader(self, task_id: str) -> Grade:
        """How an attempt at this task is graded (from the destination's state, never a claim)."""
        ...


@dataclass(frozen=True)
class TaskViews:
    """A task as an adapter may hand it to a subject: the agent view, and (lazily) the oracle."""

    task_id: str
    workload: Workload

    def agent(self) -> Mapping[str, Any]:
        return self.workload.agent_task(self.task_id)

    def oracle(self) -> Mapping[str, Any]:
        return self.workload.oracle_task(self.task_id)

    def prompt(self, status_command: str | None = None) -> str:
        return self.workload.agent_prompt(self.task_id, status_command)
