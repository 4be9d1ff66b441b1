"""No-op attempts through the real cluster path, to measure where one coordinator stops scaling.

`simulated_attempt_task` is `run_attempt_task` with the attempt itself replaced by a journal of
what a completed attempt records (started, graded with a small report blob, ended; a fault
scheduled and armed whose trigger is never reached, so each cell takes one attempt):
the request, the worker's protocol check, the plan, the bundle, the coordinator's checks and
writes are the real ones; no namespace, container or subject is made. Only for
`tests/perf/bench_cluster.py`: a simulated journal is not evidence of anything.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.records import (
    AttemptEnded,
    AttemptStarted,
    GraderResult,
    LifecycleTransition,
)
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.runtime.attempt.api import AttemptPlan, journal_name
from runner.scale.cluster_bundle import AttemptBundle, AttemptRequest
from runner.scale.worker_runtime import WorkerRuntime, run_attempt_task

SCRATCH_VAR = "AFB_SIM_SCRATCH"


class SimulatedRuntime(WorkerRuntime):
    def open(self) -> WorkerRuntime:
        if not self._open:
            # under the benchmark's own temp folder when it names one (removed with it)
            where = os.environ.get(SCRATCH_VAR) or None
            self.scratch = Path(tempfile.mkdtemp(prefix=f"afb-sim-{self.worker_id}-", dir=where))
            self.store = EvidenceStore(self.scratch)
            self._open = True
        return self

    def close(self) -> None:
        import shutil

        if self._open:
            self._open = False
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _run_attempt(self, plan: AttemptPlan) -> None:
        ref = {"cell_id": plan.cell_id, "attempt": plan.attempt}
        with self.store.journal(journal_name(plan.cell_id, plan.attempt)) as j:
            if plan.kind != NO_FAULT:  # scheduled and armed; the trigger is never reached
                for state in ("scheduled", "armed"):
                    j.append(LifecycleTransition(**ref, fault_id=plan.fault_id, state=state))
            j.append(
                AttemptStarted(
                    **ref,
                    slot_id=plan.slot_id,
                    subject_id=plan.subject_id,
                    subject_config_hash=plan.subject_config_hash,
                    fault_id=plan.fault_id,
                    kind=plan.kind,
                )
            )
            report = self.store.put_json_blob({"simulated": True, "cell": plan.cell_id})
            j.append(
                GraderResult(
                    **ref,
                    grader_id=plan.grader_id,
                    grader_version=plan.grader_version,
                    scorer_version=plan.scorer_version,
                    completed=True,
                    intended_effects=1,
                    committed_effects=1,
                    report=report,
                    shape_ok=True,
                )
            )
            j.append(
                AttemptEnded(**ref, outcome="subject_finished", trigger_reached=False, wall_ns="1")
            )


def simulated_attempt_task(req: AttemptRequest) -> AttemptBundle:
    return run_attempt_task(req, SimulatedRuntime)
