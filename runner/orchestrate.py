"""Running a spec end to end, as library calls: `run_spec` (bench run) and `rerun` (bench
reproduce --rerun). The CLI parses arguments, calls one of these, and maps the outcome to an
exit code; display is passed in (`log`, `progress`).

Layering: cli -> orchestrate -> (runtime, benchmarks, imagebuild) -> evaluator. This is the one
place that pairs the runtime's executor with a benchmark: the spec's grader id picks the
`Workload` (runner.benchmarks.registry), whose image is built here from its declared inputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from runner.benchmarks.registry import workload_for
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.environment.hooks import environment_hook
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.results import SubjectResult, derive, write_results
from runner.runtime.executor import MatrixRun
from runner.runtime.workload import Workload

Log = Callable[[str], None]
# (total cells, cells already finished) -> a context yielding "one more cell finished"
Progress = Callable[[int, int], AbstractContextManager[Callable[[], None]]]


@contextlib.contextmanager
def no_progress(total: int, completed: int) -> Iterator[Callable[[], None]]:
    yield lambda: None


def _quiet(line: str) -> None:
    return None


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    results: dict[str, SubjectResult]

    @property
    def complete(self) -> bool:
        """Every subject has a scorecard (else: incomplete evidence, exit 3)."""
        return all(r.scorecard is not None for r in self.results.values())


def evaluate_and_write(run_dir: Path, log: Log = _quiet) -> dict[str, SubjectResult]:
    """Derive every result from the run's evidence alone and write RUN_DIR/results/, then the
    derived views (report.html, junit.xml) beside them.

    The views come last and cannot take anything with them: a view that fails to render is
    reported and the results stand (they are what the exit code is about).
    """
    _, results, files = derive(run_dir, evaluator_digest(), environment_hook)
    write_results(run_dir, files)
    from runner.report import write_junit, write_report

    for view in (write_report, write_junit):
        try:
            log(f"{view.__name__.removeprefix('write_')}: {view(run_dir)}")
        except Exception as exc:  # a view is derived; its failure must not mask the results
            log(f"[bold red]{view.__name__} failed[/]: {type(exc).__name__}: {exc}")
    return results


def run_spec(
    spec_path: Path,
    out_root: Path,
    *,
    jobs: int = 1,
    resume: Path | None = None,
    draft: bool = False,
    log: Log = _quiet,
    progress: Progress = no_progress,
) -> RunOutcome:
    """Resolve, check the freeze, run every unfinished cell, evaluate and write results."""
    from runner.runtime.host import naming, sweep

    workload = workload_for(load_spec(spec_path), spec_path)
    if resume is not None:
        mrun = MatrixRun.resume(spec_path, resume, workload)
        leftovers = sweep.sweep(prefix_filter=mrun.rp.run_id)
        if leftovers.removed_anything:
            log(f"removed leftovers: {leftovers.model_dump(exclude_defaults=True)}")
    else:
        mrun = MatrixRun.create(spec_path, out_root, naming.new_run_id(), draft, workload)
    run_dir = run_matrix(mrun, workload, jobs, log=log, progress=progress)
    return RunOutcome(run_dir, evaluate_and_write(run_dir, log))


def run_matrix(
    mrun: MatrixRun,
    workload: Workload,
    jobs: int,
    *,
    log: Log = _quiet,
    progress: Progress = no_progress,
) -> Path:
    """Execute every unfinished cell of a prepared run in the workload's sandbox image."""
    from runner.imagebuild import builder as images
    from runner.runtime import envcollect
    from runner.runtime.attempt import run as attempt
    from runner.runtime.attempt.services import RunServices
    from runner.runtime.executor import execute

    run_dir, run_id = mrun.run_dir, mrun.rp.run_id
    log(f"run {run_id} in {run_dir}")
    built = images.ensure_image(project_root() / "images" / workload.image)
    env = envcollect.observe(mrun.spec, image=built.tag)  # names the image in the artifact
    mrun.record_start(env.to_json(), env.execution_environment_hash)
    states = mrun.cell_states()
    remaining = sum(not s.finished for s in states)
    with (
        RunServices(run_id, run_dir) as services,
        progress(len(states), len(states) - remaining) as advance,
    ):
        summary = execute(
            mrun,
            built.tag,
            lambda plan: attempt.run_attempt(plan, services),
            jobs,
            on_cell_done=lambda cell, n: advance(),
        )
    log(f"{summary.attempts_run} attempts over {summary.cells} cells in {summary.wall_s:.1f} s")
    return run_dir


@dataclass(frozen=True)
class RerunOutcome:
    """`refused`: this machine does not conform (reason codes); else `differing` cells."""

    refused: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    run_dir: Path | None = None

    @property
    def reproduced(self) -> bool:
        return not self.refused and not self.differing


def rerun(
    bundle: Path,
    out_root: Path,
    *,
    jobs: int = 1,
    log: Log = _quiet,
    progress: Progress = no_progress,
) -> RerunOutcome:
    """Re-execute a bundle's matrix here (only on a conforming machine) and compare every
    cell's deterministic projection with the published one."""
    from runner.evaluator.core.canonical import parse_json
    from runner.evaluator.environment.artifact import load_environment
    from runner.evaluator.environment.conformance import check_environments
    from runner.evaluator.evidence.journal import EvidenceStore
    from runner.evaluator.evidence.loading import LoadedEvidence
    from runner.evaluator.protocol.runfile import read_protocol
    from runner.evaluator.publish.reproduce import projection
    from runner.evaluator.verdict.eligibility import evaluate_run
    from runner.runtime import envcollect
    from runner.runtime.host import naming

    rp = read_protocol(bundle)
    spec_path = project_root() / "specs" / rp.spec_name
    spec = rp.spec()
    store = EvidenceStore(bundle)
    published = LoadedEvidence.from_store(store)
    workload = workload_for(load_spec(spec_path), spec_path)
    # The image is part of the environment: a rerun on another image is refused like any drift.
    from runner.imagebuild import builder as images

    built = images.ensure_image(project_root() / "images" / workload.image)
    here = envcollect.observe(spec, image=built.tag)
    then = [load_environment(parse_json(store.get_blob(r.artifact))) for r in published.environment]
    proof = check_environments([*then, here], spec.factors, spec.sources)
    if not proof.conform:
        return RerunOutcome(refused=list(proof.reason_codes))
    mrun = MatrixRun.create(spec_path, out_root, naming.new_run_id(), False, workload)
    if mrun.rp.identities.protocol_hash != rp.identities.protocol_hash:
        raise InputError(
            f"{spec_path} resolves to another protocol than the bundle's", file=str(spec_path)
        )
    run_dir = run_matrix(mrun, workload, jobs, log=log, progress=progress)
    digest = evaluator_digest()
    old = evaluate_run(rp, published, digest)
    new = evaluate_run(
        read_protocol(run_dir), LoadedEvidence.from_store(EvidenceStore(run_dir)), digest
    )
    differing = []
    for subject in sorted(old):
        a = projection(old[subject].terminal_records)
        b = projection(new[subject].terminal_records)
        differing += [f"{subject}: {x!r}" for x, y in zip(a, b, strict=True) if x != y]
    return RerunOutcome(differing=differing, run_dir=run_dir)
