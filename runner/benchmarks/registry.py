"""Which benchmark a spec runs: its `[grader].id` names a registered workload.

The orchestration layer (runner/orchestrate.py) asks here and hands the `Workload` to the
runtime's executor; the runtime itself never imports a benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.benchmarks.swe_lite.workload import SweLiteWorkload
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import spec_base
from runner.runtime.workload import Workload

# grader id -> the workload of a spec (and the folder its task paths are relative to)
WorkloadFactory = Callable[[Spec, Path], Workload]
WORKLOADS: dict[str, WorkloadFactory] = {
    "swe-lite": SweLiteWorkload.from_spec,
}


def workload_for(spec: Spec, spec_path: Path) -> Workload:
    factory = WORKLOADS.get(spec.grader.id)
    if factory is None:
        raise InputError(
            f"grader {spec.grader.id!r} names no benchmark this runner can execute; "
            f"registered: {sorted(WORKLOADS)}",
            file=str(spec_path),
            key="grader.id",
        )
    return factory(spec, spec_base(spec_path))
