"""Running a spec end to end, as library calls: `run_spec` (bench run) and `rerun` (bench
reproduce --rerun). The CLI parses arguments, calls one of these, and maps the outcome to an
exit code; display is passed in (`log`, `progress`).

Layering: cli -> orchestrate -> (runtime, benchmarks, imagebuild) -> evaluator. This is the one
place that pairs the runtime's executor with a benchmark: the spec's grader id picks the
`Workload` (runner.benchmarks.registry), whose image is built here from its declared inputs.

`--cluster` hands the attempts to Dask workers instead (runner.scale.cluster; this process stays
the single writer of evidence); `--shard i/N` keeps the cells of one hash shard
(runner.scale.shard) and writes evidence only: the shards are evaluated once merged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.benchmarks.registry import workload_for
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.evidence.layout import require as require_layout
from runner.evaluator.publish.results import SubjectResult, evaluate_into
from runner.runtime.executor import MatrixRun
from runner.runtime.prepared import SpecSource, prepare
from runner.runtime.workload import Workload
from runner.signing.sign import sign_if_keyed

if TYPE_CHECKING:
    from runner.evaluator.protocol.matrix import Cell
    from runner.scale.cluster import ClusterDisplay

Log = Callable[[str], None]
# (total cells, cells already finished) -> a context yielding "one more cell finished"
Progress = Callable[[int, int], AbstractContextManager[Callable[[], None]]]


@contextlib.contextmanager
def no_progress(total: int, completed: int) -> Iterator[Callable[[], None]]:
    yield lambda: None


def _quiet(line: str) -> None:
    return None


@dataclass(frozen=True)
class Cluster:
    """Where attempts run when not here: a Dask scheduler, the resources each attempt needs,
    and (optional) the display of cells per worker and attempts in flight."""

    address: str
    resources: Mapping[str, float] = field(default_factory=dict)
    display: ClusterDisplay | None = None


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def keeps(self, cell: Cell) -> bool:
        from runner.scale.shard import in_shard

        return in_shard(cell.cell_id, self.index, self.count)


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    results: dict[str, SubjectResult]
    shard: Shard | None = None
    shard_cells: int = 0  # cells of the shard (a shard run is not evaluated)
    subject_dirs: Path | None = None  # kept subject state directories (--keep-subject-dirs)

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
    require_layout(run_dir)  # nothing unexpected (a FIFO journal would block the reader)
    _, results = evaluate_into(run_dir, evaluator_digest())
    sign_if_keyed(run_dir, log)  # runner/signing/sign.py: signatures/, when a key is configured
    from runner.report import write_junit, write_report

    for view in (write_report, write_junit):
        try:
            log(f"{view.__name__.removeprefix('write_')}: {view(run_dir)}")
        except Exception as exc:  # a view is derived; its failure must not mask the results
            log(f"[bold red]{view.__name__} failed[/]: {type(exc).__name__}: {exc}")
    return results


@dataclass(frozen=True)
class RunOptions:
    """What `bench run` was asked for, as one value (the CLI builds it, `run_spec` reads it).

    `shard`: only that shard's cells run and nothing is evaluated (`bench merge` joins the
    shards into one run directory that evaluates like a single-host run). `keep_subject_dirs`
    (a local run): each attempt's subject state directory (the agent's own stdout.log,
    stderr.log, event log and files) stays after the run, outside the evidence. `only` (`--only`
    values, runner/runtime/cellselect.py): just those cells run, and only as a draft: the run
    records no freeze, so it never mints a scorecard."""

    out_root: Path = Path("runs")
    jobs: int = 1
    resume: Path | None = None
    draft: bool = False
    cluster: Cluster | None = None
    shard: Shard | None = None
    keep_subject_dirs: bool = False
    only: tuple[str, ...] = ()
    sandbox_backend: str = "podman"  # a name in runner/runtime/sandbox/registry.py

    def __post_init__(self) -> None:  # refused before anything is read or written
        from runner.runtime.sandbox import registry

        if self.cluster is not None and self.sandbox_backend != registry.DEFAULT:
            raise InputError(
                "--sandbox chooses a local run's backend; a cluster's workers choose their own "
                "(bench worker --sandbox NAME)"
            )
        registry.require(self.sandbox_backend)
        if self.keep_subject_dirs and self.cluster is not None:
            raise InputError(
                "--keep-subject-dirs keeps a local run's directories: not with --cluster"
            )


def run_spec(
    spec_path: Path,
    options: RunOptions = RunOptions(),
    *,
    log: Log = _quiet,
    progress: Progress = no_progress,
) -> RunOutcome:
    """Resolve, check the freeze, run every unfinished cell, evaluate and write results.

    The spec file is read once (runner/runtime/prepared.py): the bytes recorded in
    protocol.json, the spec parsed from them, its identities and freeze state all come from
    that one read, whether the run is created or resumed."""
    from runner.runtime import sweep
    from runner.runtime.cellselect import parse_only
    from runner.runtime.host import naming

    o = options
    source = SpecSource.read(spec_path)
    subset = parse_only(o.only, source.spec) if o.only else None  # exit 2 before a run dir
    if subset is not None and not o.draft:
        raise InputError(
            "--only runs a subset of the matrix, which is always a draft (no scorecard): "
            "pass --draft as well",
            key="--only",
        )
    workload = workload_for(source.spec, spec_path)
    client = None
    if o.cluster is not None:  # an unreachable scheduler is refused before a run directory exists
        from runner.scale.cluster import connect

        client = connect(o.cluster.address)
    try:
        if o.resume is not None:
            mrun = MatrixRun.resume(source, o.resume, workload)
            if subset is not None and mrun.rp.freeze_record is not None:
                raise InputError(
                    "--only continues a draft run only: this run is under a frozen protocol "
                    "(resume it whole, without --only)",
                    file=str(o.resume),
                )
            leftovers = sweep.sweep(prefix_filter=mrun.rp.run_id)
            if leftovers.removed_anything:
                log(f"removed leftovers: {leftovers.model_dump(exclude_defaults=True)}")
        else:
            mrun = MatrixRun.create(
                prepare(source), o.out_root, naming.new_run_id(), o.draft, workload,
                draft_only=subset is not None,
            )  # fmt: skip
            if subset is not None:
                log(f"subset (a draft): {subset.describe()}")
    except BaseException:
        if client is not None:
            client.close()
        raise
    shard = o.shard
    select = _both(shard.keeps if shard is not None else None, subset.keeps if subset else None)
    kept = None
    if o.cluster is not None:
        run_dir = run_on_cluster(
            mrun, workload, o.cluster, log=log, progress=progress, select=select, client=client
        )
    else:
        run_dir, kept = run_matrix(mrun, workload, o, log=log, progress=progress, select=select)
    if shard is not None:
        n = sum(1 for c in mrun.cells() if select is not None and select(c))
        return RunOutcome(run_dir, {}, shard, n, subject_dirs=kept)
    return RunOutcome(run_dir, evaluate_and_write(run_dir, log), subject_dirs=kept)


def _both(
    a: Callable[[Cell], bool] | None, b: Callable[[Cell], bool] | None
) -> Callable[[Cell], bool] | None:
    """The cells both selections keep (None keeps every cell)."""
    if a is None or b is None:
        return a or b
    return lambda c: a(c) and b(c)


def run_matrix(
    mrun: MatrixRun,
    workload: Workload,
    options: RunOptions,
    *,
    log: Log = _quiet,
    progress: Progress = no_progress,
    select: Callable[[Cell], bool] | None = None,
) -> tuple[Path, Path | None]:
    """Execute every unfinished cell (of those `select` keeps) of a prepared run in the
    workload's sandbox image, `options.jobs` at a time. Returns the run directory and, when
    `options.keep_subject_dirs`, the folder of the subjects' state directories (one per
    attempt, named like its journal). Every attempt judges its witnesses by the run's own
    contracts (protocol.json), not by whatever `witnesses/` holds now."""
    from runner.imagebuild import builder as images
    from runner.runtime import envcollect
    from runner.runtime.attempt import run as attempt
    from runner.runtime.attempt.services import RunServices
    from runner.runtime.executor import execute
    from runner.runtime.sandbox import registry

    run_dir, run_id = mrun.run_dir, mrun.rp.run_id
    log(f"run {run_id} in {run_dir}")
    store = registry.backend(options.sandbox_backend).images()  # the image in the run's backend
    built = images.ensure_image(project_root() / "images" / workload.image, store=store)
    env = envcollect.observe(mrun.spec, image=built.tag)  # names the image in the artifact
    mrun.record_start(env.to_json(), env.execution_environment_hash)
    states = [s for s in mrun.cell_states() if select is None or select(s.cell)]
    remaining = sum(not s.finished for s in states)
    with (
        RunServices(
            run_id,
            run_dir,
            sandbox_backend=options.sandbox_backend,
            keep_subject_dirs=options.keep_subject_dirs,
            contracts=mrun.rp.contract_map(),  # the run's own (protocol.json), not witnesses/
        ) as services,  # fmt: skip
        progress(len(states), len(states) - remaining) as advance,
    ):
        summary = execute(
            mrun,
            built.tag,
            lambda plan: attempt.run_attempt(plan, services),
            options.jobs,
            on_cell_done=lambda cell, n: advance(),
            select=select,
        )
    log(f"{summary.attempts_run} attempts over {summary.cells} cells in {summary.wall_s:.1f} s")
    return run_dir, (services.subject_root if options.keep_subject_dirs else None)


def run_on_cluster(
    mrun: MatrixRun,
    workload: Workload,
    cluster: Cluster,
    *,
    log: Log = _quiet,
    progress: Progress = no_progress,
    select: Callable[[Cell], bool] | None = None,
    client: Any = None,
) -> Path:
    """Execute every unfinished cell on a Dask cluster; this process writes all the evidence.

    The coordinator needs no Podman: the image is named by the tag of its input digest, and
    each worker checks it holds exactly that image and records its own environment."""
    from runner.imagebuild import builder as images
    from runner.scale.cluster import connect, execute_on_cluster

    run_dir, run_id = mrun.run_dir, mrun.rp.run_id
    tag = images.image_tag(project_root() / "images" / workload.image)
    client = client if client is not None else connect(cluster.address)
    try:
        log(f"run {run_id} in {run_dir} on {cluster.address}")
        mrun.record_start(None, None)  # each worker's environment is recorded as it reports
        states = [s for s in mrun.cell_states() if select is None or select(s.cell)]
        remaining = sum(not s.finished for s in states)
        with progress(len(states), len(states) - remaining) as advance:
            summary = execute_on_cluster(
                mrun, tag, client, cluster.resources, select=select, display=cluster.display,
                on_cell_done=lambda cell: advance(), log=log,
            )  # fmt: skip
    finally:
        client.close()
    log(
        f"{summary.attempts_run} attempts over {summary.cells} cells in {summary.wall_s:.1f} s on"
        f" {len(summary.cells_per_worker)} workers; lost with their worker: {len(summary.lost)}"
    )
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
    store = EvidenceStore(bundle, create=False)
    published = LoadedEvidence.from_store(store)
    source = SpecSource.read(spec_path)  # the one read of this checkout's spec
    prepared = prepare(source)
    if prepared.identities.protocol_hash != rp.identities.protocol_hash:
        raise InputError(
            f"{spec_path} resolves to another protocol than the bundle's", file=str(spec_path)
        )
    workload = workload_for(source.spec, spec_path)
    # The image is part of the environment: a rerun on another image is refused like any drift.
    from runner.imagebuild import builder as images

    built = images.ensure_image(project_root() / "images" / workload.image)
    here = envcollect.observe(spec, image=built.tag)
    then = [load_environment(parse_json(store.get_blob(r.artifact))) for r in published.environment]
    proof = check_environments([*then, here], spec.factors, spec.sources)
    if not proof.conform:
        return RerunOutcome(refused=list(proof.reason_codes))
    mrun = MatrixRun.create(prepared, out_root, naming.new_run_id(), False, workload)
    run_dir, _ = run_matrix(mrun, workload, RunOptions(jobs=jobs), log=log, progress=progress)
    digest = evaluator_digest()
    old = evaluate_run(rp, published, digest)
    new_store = EvidenceStore(run_dir, create=False)
    new = evaluate_run(read_protocol(run_dir), LoadedEvidence.from_store(new_store), digest)
    differing = []
    for subject in sorted(old):
        a = projection(old[subject].terminal_records)
        b = projection(new[subject].terminal_records)
        differing += [f"{subject}: {d}" for d in differing_cells(a, b)]
    return RerunOutcome(differing=differing, run_dir=run_dir)


def differing_cells(published: Sequence[bytes], again: Sequence[bytes]) -> list[str]:
    """The cells whose projection lines differ, matched by cell id (the lines are sorted by
    content, so one changed cell moves every line after it: never compare them by position)."""
    from runner.evaluator.core.canonical import parse_json

    def by_cell(lines: Sequence[bytes]) -> dict[str, bytes]:
        return {str(parse_json(line)["cell_id"]): line for line in lines}

    a, b = by_cell(published), by_cell(again)
    out = []
    for cell in sorted(a.keys() | b.keys()):
        if a.get(cell) != b.get(cell):
            out.append(f"{cell}: published {a.get(cell)!r}, again {b.get(cell)!r}")
    return out
