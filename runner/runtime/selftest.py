"""Negative conformance on this machine: every fault kind once real, once with a no-op actuator.

Each case is a real attempt (`run_attempt`) of the minimal deterministic subject
(`runner/subjects/minimal.py`) with a trivial grade; the verdict comes from the EVALUATOR
(`outcomes.attempt_status` over the attempt's journal against `witnesses/`), never from the
runtime. A real actuator must be WITNESSED, a no-op one (which still reports "applied")
INVALID_INJECTION; anything else means fault injection cannot be trusted here.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import runner.runtime.faults.registry as faults
from runner.evaluator.core.canonical import digest, sha256_digest
from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.protocol.faultkinds import NO_FAULT, FaultKind, injected_kinds
from runner.evaluator.protocol.witness import WitnessContract
from runner.evaluator.verdict.outcomes import attempt_status, group_attempts
from runner.runtime.attempt.api import AttemptPlan, GradeContext, GradeOutcome, SubjectCommand
from runner.runtime.attempt.run import journal_name, run_attempt
from runner.runtime.attempt.services import RunServices
from runner.runtime.host import naming
from runner.runtime.sandbox import registry, testimage

SCORER_VERSION = "selftest-1"
ACTUATORS: tuple[Literal["real", "noop"], ...] = ("real", "noop")
WITNESSED = "WITNESSED"
INVALID_INJECTION = Status.INVALID_INJECTION.value


def minimal_subject_path() -> Path:
    return Path(__file__).resolve().parents[1] / "subjects" / "minimal.py"


def subject_python() -> str:
    """A Python the unprivileged subject can execute (the venv's may live under /root)."""
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def minimal_subject(env: Mapping[str, str] | None = None, **kw: Any) -> SubjectCommand:
    argv = [subject_python(), "-I", str(minimal_subject_path())]
    return SubjectCommand(argv=argv, env=dict(env or {}), **kw)


def trivial_grade(ctx: GradeContext) -> GradeOutcome:
    """Done iff the destination holds exactly the one effect of this attempt's scope."""
    items, failures = ctx.read_ledger(ctx.scope)
    if items is None:
        return GradeOutcome(False, 1, 0, shape_ok=False, shape_failures=failures)
    return GradeOutcome(
        completed=len(items) == 1,
        intended_effects=1,
        committed_effects=len(items),
        shape_ok=True,
        report={"effects": [i.get("effect_id") for i in items]},
    )


# The self-test's minimal subject submits with POST /effects: that request is its irreversible
# tool, named as the self-test cases' triggers name it.
SELFTEST_EFFECT_ROUTES: Mapping[tuple[str, str], str] = {("POST", "/effects"): "submit_patch"}


def selftest_plan(
    run_id: str,
    run_dir: Path,
    kind: FaultKind,
    actuator: Literal["real", "noop"],
    image: str,
    *,
    label: str = "selftest",
    trigger: Mapping[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
    subject: SubjectCommand | None = None,
    grade: Callable[[GradeContext], GradeOutcome] = trivial_grade,
) -> AttemptPlan:
    # a baseline (`none`) has no plugin and no case: no trigger, no parameters
    case = faults.plugin_for(kind).selftest if kind != NO_FAULT else faults.SelftestCase({})
    case_trigger, case_params = case.trigger, case.parameters
    trig = dict(trigger if trigger is not None else case_trigger or {}) or None
    params = dict(parameters if parameters is not None else case_params)
    subj = subject or minimal_subject()
    # One cell per distinct case, so variants in one run never share a journal.
    cell = {
        "selftest": label,
        "kind": kind,
        "actuator": actuator,
        "run": run_id,
        "trigger": trig,
        "parameters": params,
        "argv": list(subj.argv),
        "env": dict(subj.env),
    }
    return AttemptPlan(
        run_id=run_id,
        run_dir=run_dir,
        cell_id=digest(cell),
        slot_id=digest({**cell, "slot": True}),
        subject_id="minimal",
        subject_config_hash=sha256_digest(minimal_subject_path().read_bytes()),
        attempt=1,
        task_id="selftest",
        fault_id=f"{kind}-1",
        kind=kind,
        trigger=trig,
        parameters=params,
        image=image,
        subject=subj,
        grader_id="selftest.trivial",
        grader_version="1",
        scorer_version=SCORER_VERSION,
        grade=grade,
        proxy_tools=dict(SELFTEST_EFFECT_ROUTES),
        actuator=actuator,
    )


@dataclass(frozen=True)
class Verdict:
    status: Status
    reasons: list[str]
    violated: list[str] = field(default_factory=list)  # witness predicates only

    @property
    def label(self) -> str:
        if self.status in (Status.COMPLETED, Status.FAILED):
            return WITNESSED
        return self.status.value


def evaluate(run_dir: Path, plan: AttemptPlan, contract: WitnessContract | None) -> Verdict:
    """The evaluator's status of one attempt, from its journal only."""
    path = run_dir / "journals" / f"{journal_name(plan)}.jsonl"
    entries = [(path.stem, e.seq, e.record) for e in read_journal(path)]
    attempts = group_attempts(entries).get(plan.cell_id, {})
    a = attempts.get(plan.attempt)
    if a is None:
        return Verdict(Status.HARNESS_INVALID, ["no_records"])
    status, reasons = attempt_status(
        a, plan.kind, dict(plan.parameters), contract, plan.scorer_version
    )
    violated = [r.removeprefix("witness:") for r in reasons if r.startswith("witness:")]
    return Verdict(status, reasons, violated)


@dataclass(frozen=True)
class Row:
    kind: str
    actuator: str
    verdict: str
    status: str
    reasons: list[str]
    violated: list[str]
    expected: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict == self.expected


def run_case(
    services: RunServices,
    kind: FaultKind,
    actuator: Literal["real", "noop"],
    image: str,
    *,
    plugin_factory: faults.PluginFactory | None = None,
    **plan_kw: Any,
) -> tuple[Row, AttemptPlan]:
    plan = selftest_plan(services.run_id, services.run_dir, kind, actuator, image, **plan_kw)
    t0 = time.monotonic()
    run_attempt(plan, services, plugin_factory=plugin_factory)
    v = evaluate(services.run_dir, plan, services.contracts.get(kind))
    row = Row(
        kind=kind,
        actuator=actuator,
        verdict=v.label,
        status=v.status.value,
        reasons=v.reasons,
        violated=v.violated,
        expected=WITNESSED if actuator == "real" else INVALID_INJECTION,
        seconds=round(time.monotonic() - t0, 2),
    )
    return row, plan


def run_selftest(
    kinds: Iterable[FaultKind] | None = None,
    *,
    image: str | None = None,
    run_dir: Path | None = None,
    keep: bool = False,
    on_row: Callable[[Row], None] | None = None,
    sandbox_backend: str = registry.DEFAULT,
) -> tuple[list[Row], Path]:
    """Run each kind real then no-op; returns the rows and the run directory used.

    By default every kind registered with the evaluator or with a plugin: a kind the evaluator
    knows but no plugin acts out is a failing row, not a silent omission.
    """
    if kinds is None:
        kinds = sorted(set(injected_kinds()) | set(faults.registered()))
    image = image or testimage.ensure_test_image(registry.backend(sandbox_backend).images())[0]
    run_id = naming.new_run_id()
    owned = run_dir is None
    rd = run_dir or Path(tempfile.mkdtemp(prefix="afb-st-"))
    rows: list[Row] = []
    try:
        with RunServices(run_id, rd, sandbox_backend=sandbox_backend) as services:
            for kind in kinds:
                try:
                    faults.plugin_for(kind)
                except ValueError as exc:
                    row = Row(
                        kind, "real", "NO_PLUGIN", "NO_PLUGIN", [str(exc)], [], WITNESSED, 0.0
                    )
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
                    continue
                for actuator in ACTUATORS:
                    row, _ = run_case(services, kind, actuator, image)
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
    finally:
        if owned and not keep:
            shutil.rmtree(rd, ignore_errors=True)
    return rows, rd
