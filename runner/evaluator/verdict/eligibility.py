"""The validator: evidence + frozen protocol -> one EligibilityProof per subject.

The first gate is complete accounting: every registered cell, overall and in every stratum, has
a final subject outcome (COMPLETED, FAILED, SUBJECT_PRE_TRIGGER_FAILURE or SCENARIO_MISMATCH).
Every reason a subject is ineligible is a reason code in the proof; a proof with any reason code
is `ineligible`, and only an eligible proof can construct a scorecard. Fault coverage is
reported as the RFC defines it, witnessed faulted cells over scheduled faulted cells, with the
baseline cells apart. A SCENARIO_MISMATCH blocks its stratum's comparison (the proof lists the
stratum in `scenario_mismatch_strata`), not the subject.
"""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pydantic_core
from pydantic import ConfigDict, Field

from runner.evaluator.core import reasons as R
from runner.evaluator.core.canonical import digest, fast_digest
from runner.evaluator.core.types import Frozen, Status
from runner.evaluator.environment.stage import check_environment
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import stratum_key
from runner.evaluator.protocol.runfile import RunProtocol, consistency_problems

from .outcomes import TerminalRecord, jsonl_hash, terminal_line
from .terminals import RegisteredIndex, TerminalSpill

PROOF_SCHEMA = "afb.proof/3"
# Final subject outcomes: a cell with one of these is accounted for.
DECIDED = frozenset(
    {Status.COMPLETED, Status.FAILED, Status.SUBJECT_PRE_TRIGGER_FAILURE, Status.SCENARIO_MISMATCH}
)
# A faulted cell with one of these had its fault witnessed (attempt_status checks the witness
# before it grades a faulted cell).
WITNESSED = frozenset({Status.COMPLETED, Status.FAILED})


class StratumCoverage(Frozen):
    registered: int  # every registered cell
    decided: int  # cells with a final subject outcome (the gate: all of them)
    baseline: int  # registered baseline cells (fault kind none), reported apart
    scheduled: int  # registered faulted cells: the scheduled faults
    witnessed: int  # faulted cells whose fault was witnessed
    # faulted cells whose subject failed before the trigger; None (sealed) in an ineligible
    # proof, where it would tell the cells the subject completed from those it failed
    pre_trigger_failures: int | None


class Coverage(StratumCoverage):
    """Fault coverage is `witnessed / scheduled`; the integers are authoritative."""

    strata: dict[str, StratumCoverage]


class EligibilityProof(Frozen):
    schema_version: Literal["afb.proof/3"] = Field(default="afb.proof/3", alias="schema")
    subject_id: str
    subject_config_hash: str
    protocol_id: str
    protocol_hash: str
    policy_hash: str
    matrix_hash: str
    cell_set_hash: str
    evaluator_digest: str
    recorded_evaluator_digest: str
    protocol_status: Literal["draft", "frozen"]
    evidence_root_hash: str
    terminal_records_hash: str
    environment_conformance: str | None
    execution_environment_hash: str | None
    coverage: Coverage
    not_comparable_strata: list[str]
    # strata where the subject completed without reaching its trigger; None (sealed) when
    # ineligible, for the same reason
    scenario_mismatch_strata: list[str] | None
    decision: Literal["eligible", "ineligible"]
    reason_codes: list[str]
    proof_hash: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"proof_hash"})

    def hash_is_valid(self) -> bool:
        return digest(self.body()) == self.proof_hash


def seal_proof(fields: dict[str, Any]) -> EligibilityProof:
    unsealed = EligibilityProof.model_validate({**fields, "proof_hash": "sha256:" + "0" * 64})
    return unsealed.model_copy(update={"proof_hash": digest(unsealed.body())})


def _cell_id(slot_id: str, subject_hash: str) -> str:
    """`matrix.cell_id`, through the fast encoder (same bytes, same digest)."""
    return fast_digest({"slot": slot_id, "subject": subject_hash})


# ---------------------------------------------------------------------------------- validating


@dataclass(frozen=True)
class SubjectEvaluation:
    """A subject's proof and its terminal records, held as terminal-records.jsonl bytes: their
    canonical lines in cell-id order, each ended by a newline.

    One bytes object, not models nor a list of lines: at a million cells those would not fit the
    memory budget, and every consumer (the proof's hash, the terminal-records file, the
    publication pass) wants exactly these bytes.
    """

    proof: EligibilityProof
    terminal_jsonl: bytes
    # False for an evaluation streamed to disk (`results.evaluate_into`): its lines are not held
    # (`terminal_jsonl` is empty) and are asked for in vain; an eligible subject's are in
    # results/<subject>/terminal-records.jsonl.
    held: bool = True
    # The truthfulness findings of its cells that have any (verdict/told.py `truth_line`s, in
    # cell-id order), derived with the terminal records; None when they were not (evidence held
    # in memory: then `publish/truthfulness.TruthReader` reads them from the run directory).
    truth_jsonl: bytes | None = None

    def terminal_lines(self) -> Iterator[bytes]:
        """Each record's canonical line, without its newline, in cell-id order."""
        if not self.held:
            raise RuntimeError("this evaluation was streamed to disk: its lines are not held")
        for line in io.BytesIO(self.terminal_jsonl):
            yield line[:-1]

    @property
    def terminal_records(self) -> list[TerminalRecord]:
        return [TerminalRecord.model_validate_json(line) for line in self.terminal_lines()]


def evaluate_run(
    rp: RunProtocol,
    evidence: LoadedEvidence,
    current_evaluator_digest: str,
    regrading: bool = False,
) -> dict[str, SubjectEvaluation]:
    """Decide every subject of the run. Deterministic in the evidence's content.

    `regrading` (publish/regrade.py only) judges evidence recorded under another evaluator: the
    evaluator mismatch is then no reason (the proof names both digests), and neither is a policy
    hash that binds the recording evaluator's schema versions, which the caller has checked.
    """
    return dict(evaluate_subjects(rp, evidence, current_evaluator_digest, regrading))


def evaluate_subjects(
    rp: RunProtocol,
    evidence: LoadedEvidence,
    current_evaluator_digest: str,
    regrading: bool = False,
) -> Iterator[tuple[str, SubjectEvaluation]]:
    """`evaluate_run`, one subject at a time (in subject-id order): only the subject being
    yielded holds its terminal lines, so a caller that writes each out and drops it holds one."""
    ids = rp.identities
    run_reasons: list[str] = []
    problems = consistency_problems(rp)
    if regrading:
        problems = [p for p in problems if not p.startswith("policy_hash")]
    if problems:
        run_reasons.append(R.PROTOCOL_INCONSISTENT)
    # A draft never mints a scorecard: the policy has no setting that could allow it.
    frozen = rp.freeze_record is not None and rp.freeze_record.protocol_hash == ids.protocol_hash
    if not frozen:
        run_reasons.append(R.PROTOCOL_DRAFT)
    if current_evaluator_digest != ids.evaluator_digest and not regrading:
        run_reasons.append(R.EVALUATOR_MISMATCH)
    slot_counts = Counter(s.slot_id for s in rp.slots)
    if any(n > 1 for n in slot_counts.values()):
        run_reasons.append(R.DUPLICATE_CELL)
    del slot_counts
    # the environment stage, run here: no caller can judge a run without it
    env_proof, env_hash, env_reasons, _ = check_environment(rp, evidence)
    run_reasons += env_reasons

    # Streams the evidence one cell at a time; its root and any unregistered cell are known
    # only at the end, so the terminal records wait in a spill file (see verdict/terminals.py).
    with TerminalSpill.derive(rp, evidence, RegisteredIndex(rp)) as spill:
        if spill.unregistered:
            run_reasons.append(R.UNREGISTERED_CELL)
        for subject_id, shash in sorted(ids.subject_config_hashes.items()):
            ev = _decide(
                rp, subject_id, shash, spill.jsonl(subject_id), _facts_of_lines, run_reasons,
                evidence.evidence_root_hash, frozen, current_evaluator_digest, env_proof,
                env_hash,
            )  # fmt: skip
            yield subject_id, replace(ev, truth_jsonl=spill.truth_jsonl(subject_id))


def decide_subject(
    rp: RunProtocol,
    subject_id: str,
    shash: str,
    terminals: Iterable[TerminalRecord],
    run_reasons: list[str],
    evidence_root_hash: str,
    frozen: bool,
    evaluator: str,
    env_proof: str | None,
    env_hash: str | None,
) -> SubjectEvaluation:
    """One subject's proof from its terminal records, consumed as a stream (one pass, O(strata)
    state besides the canonical lines the proof's hash and the results need)."""
    buf = bytearray()
    facts: list[Facts] = []
    for t in terminals:
        buf += terminal_line(t)
        buf += b"\n"
        facts.append(_facts_of_record(t))
    return _decide(
        rp, subject_id, shash, bytes(buf), lambda _: iter(facts), run_reasons,
        evidence_root_hash, frozen, evaluator, env_proof, env_hash,
    )  # fmt: skip


# What a proof reads of one terminal record: (cell id, stratum, kind, status, each attempt's
# status, the last attempt's reasons, the record's reasons).
Facts = tuple[str, str, str, Status | None, list[Status], list[str], list[str]]
_STATUS = {s.value: s for s in Status}


def _facts_of_record(t: TerminalRecord) -> Facts:
    last = t.attempts[-1].reasons if t.attempts else []
    return (t.cell_id, t.stratum, t.kind, t.status, [a.status for a in t.attempts], last,
            t.reasons)  # fmt: skip


def _facts_of_lines(jsonl: bytes) -> Iterator[Facts]:
    """The facts of terminal lines this process wrote (`outcomes.terminal_line` of valid
    TerminalRecords), read as plain JSON: the same values as the records' fields."""
    for line in io.BytesIO(jsonl):
        t = pydantic_core.from_json(line)
        attempts = t["attempts"]
        status = t["status"]
        yield (
            t["cell_id"], t["stratum"], t["kind"], None if status is None else _STATUS[status],
            [_STATUS[a["status"]] for a in attempts], attempts[-1]["reasons"] if attempts else [],
            t["reasons"],
        )  # fmt: skip


def _decide(
    rp: RunProtocol,
    subject_id: str,
    shash: str,
    jsonl: bytes,
    facts_of: Callable[[bytes], Iterator[Facts]],
    run_reasons: list[str],
    evidence_root_hash: str,
    frozen: bool,
    evaluator: str,
    env_proof: str | None,
    env_hash: str | None,
) -> SubjectEvaluation:
    """A proof from a subject's terminal-records.jsonl bytes and the facts of its records."""
    spec = rp.spec()
    ids = rp.identities
    reasons = set(run_reasons)
    # per stratum: registered, decided, baseline, scheduled, witnessed, pre-trigger failures
    strata: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    mismatched: set[str] = set()
    invalid_attempts: dict[str, int] = defaultdict(int)
    previous = ""
    for cell, stratum, kind, status, attempts, last, own in facts_of(jsonl):
        if cell <= previous:
            raise ValueError(
                f"terminal records must arrive in cell-id order, each once: {cell} after {previous}"
            )
        previous = cell
        counts = strata[stratum]
        counts[0] += 1
        if kind == NO_FAULT:
            counts[2] += 1
        else:
            counts[3] += 1
            counts[4] += status in WITNESSED
            counts[5] += status is Status.SUBJECT_PRE_TRIGGER_FAILURE
        if status in DECIDED:
            counts[1] += 1
            if status is Status.SCENARIO_MISMATCH:
                mismatched.add(stratum)
        elif status is None:
            reasons.add(R.MISSING_CELLS)
        else:
            reasons.add(R.STATUS_REASON[status])
            reasons.update(last)
        reasons.update(own)
        n_invalid = sum(1 for a in attempts if a is Status.INVALID_INJECTION)
        invalid_attempts[stratum] = max(invalid_attempts[stratum], n_invalid)
    not_comparable = sorted(
        s
        for s, n in invalid_attempts.items()
        if n >= spec.eligibility.not_comparable_after_invalid_attempts
    )
    for s in not_comparable:
        reasons.add(R.qualified(R.NOT_COMPARABLE, s))
    # Every stratum the spec's task buckets and fault kinds imply must be present.
    expected = _expected_strata(rp)
    for s in sorted(expected - set(strata)):
        reasons.add(R.qualified(R.MISSING_STRATUM, s))
    total = [sum(v[i] for v in strata.values()) for i in range(6)]
    # The floor is 100%: every registered cell has a final subject outcome.
    if total[0] == 0 or total[1] < total[0]:
        reasons.add(R.COVERAGE_BELOW_FLOOR)
    for s, counts in sorted(strata.items()):
        if counts[1] < counts[0]:
            reasons.add(R.qualified(R.STRATUM_BELOW_FLOOR, s))
    # The publication boundary: an ineligible proof says nothing that depends on whether the
    # subject succeeded (a pre-trigger failure vs a completion that avoided the trigger).
    sealed = bool(reasons)
    coverage = Coverage(
        **_coverage(total, sealed),
        strata={s: StratumCoverage(**_coverage(c, sealed)) for s, c in strata.items()},
    )
    proof = seal_proof(
        {
            "subject_id": subject_id,
            "subject_config_hash": shash,
            "protocol_id": ids.protocol_id,
            "protocol_hash": ids.protocol_hash,
            "policy_hash": ids.policy_hash,
            "matrix_hash": ids.matrix_hash,
            "cell_set_hash": ids.cell_set_hash,
            "evaluator_digest": evaluator,
            "recorded_evaluator_digest": ids.evaluator_digest,
            "protocol_status": "frozen" if frozen else "draft",
            "evidence_root_hash": evidence_root_hash,
            "terminal_records_hash": jsonl_hash(jsonl),
            "environment_conformance": env_proof,
            "execution_environment_hash": env_hash,
            "coverage": coverage,
            "not_comparable_strata": not_comparable,
            "scenario_mismatch_strata": None if sealed else sorted(mismatched),
            "decision": "ineligible" if reasons else "eligible",
            "reason_codes": sorted(reasons),
        }
    )
    return SubjectEvaluation(proof=proof, terminal_jsonl=jsonl)


def _coverage(c: list[int], sealed: bool = False) -> dict[str, int | None]:
    names = ("registered", "decided", "baseline", "scheduled", "witnessed", "pre_trigger_failures")
    out: dict[str, int | None] = dict(zip(names, c, strict=True))
    if sealed:
        out["pre_trigger_failures"] = None
    return out


def _expected_strata(rp: RunProtocol) -> set[str]:
    spec = rp.spec()
    dims = list(spec.eligibility.strata)
    # (fault id, kind) of every fault that may apply; the fault id enters a key only when the
    # strata name it, so with the default strata this is one entry per kind as before.
    faults = [(f.id, f.kind, f) for f in spec.faults]
    out = set()
    for ts in spec.task_sets:
        # The strata depend on a task only through its bucket: one representative per bucket.
        for t in {t.bucket: t for t in ts.tasks}.values():
            if spec.matrix.baseline:
                out.add(stratum_key(dims, NO_FAULT, t.bucket, NO_FAULT))
            for fid, kind, f in faults:
                if (f.applies_to.task_sets is None or ts.id in f.applies_to.task_sets) and (
                    f.applies_to.buckets is None or t.bucket in f.applies_to.buckets
                ):
                    out.add(stratum_key(dims, kind, t.bucket, fid))
    return out
