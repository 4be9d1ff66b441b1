"""`agent = "reference:<strategy>"`: the workload's oracle subject (swe-lite's deterministic
reference strategies, runner/benchmarks/swe_lite/subjects/reference.py), the only adapter given
the oracle view."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import StrictFrozen
from runner.evaluator.protocol.spec import Subject
from runner.runtime.attempt.api import SubjectCommand
from runner.runtime.host import paths
from runner.runtime.subjects.config import ModelSection
from runner.runtime.subjects.model import model_plans
from runner.runtime.subjects.registry import Launch, ResolveContext, register_adapter, typed_config
from runner.runtime.workload import TaskViews

# runner/benchmarks/swe_lite/subjects/reference.py's strategies (a subject imports nothing of
# runner; a test keeps the two lists equal).
REFERENCE_STRATEGIES = ("blind_retry", "checkpoint", "idempotency_key", "intent_reconcile")


class ReferenceConfig(StrictFrozen):
    """`agent = "reference:<name>"`: a reference strategy, an oracle (swe-lite's:
    runner/benchmarks/swe_lite/subjects/reference.py).

    With `model`, it asks that model which step comes next before every step (a control whose
    model calls are as mandatory as its tool calls, so faults on tool `model` reach it)."""

    strategy: Literal["blind_retry", "checkpoint", "idempotency_key", "intent_reconcile"]
    model: ModelSection | None = Field(
        default=None, description="plan each step with this model (scripted: one turn per step)"
    )


class ReferenceAdapter:
    """`reference:<strategy>` (`ReferenceConfig`): the workload's oracle subject (its script,
    `Workload.oracle_subject`) as the subject uid, given the oracle view through its own argv
    file (`AFB_ORACLE_FILE`); AFB_TASK_FILE holds the agent view, as for every subject. With
    `config.model`, it plans every step with that model through the attempt's proxy."""

    config = ReferenceConfig

    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:
        source = ctx.workload.oracle_subject if ctx.workload is not None else None
        if source is None:
            raise InputError(
                f"subject {subject.id!r}: this spec's workload has no oracle (reference) subject"
            )
        if "strategy" not in subject.config:
            raise InputError(
                f"subject {subject.id!r}: a reference subject (agent = 'reference:...') needs "
                "config.strategy"
            )
        cfg = typed_config(subject, ReferenceConfig)
        # the planning control's model is given no tools: it answers `next: <step>`
        plans = model_plans(cfg.model, ctx, frozenset()) if cfg.model is not None else None
        script = str(self.public_script(source))
        planning = ["--plan-with-model"] if plans is not None else []

        def launch(views: TaskViews) -> SubjectCommand:
            argv = [
                "/usr/bin/python3", script,
                "--strategy", cfg.strategy, *planning,
            ]  # fmt: skip
            return SubjectCommand(
                argv=argv,
                task=dict(views.agent()),
                oracle=dict(views.oracle()),
                model=plans(views.task_id) if plans is not None else None,
            )

        return launch

    @staticmethod
    def public_script(source: Path) -> Path:
        """Copy the oracle subject somewhere `nobody` can read it, named by its content."""
        data = source.read_bytes()
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
