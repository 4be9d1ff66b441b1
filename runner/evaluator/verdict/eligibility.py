"""The validator: evidence + frozen protocol -> one EligibilityProof per subject.

The first gate is complete witnessed coverage (the policy's floor, 100% by default) overall and in
every stratum. Every reason a subject is ineligible is a reason code in the proof; a proof with
any reason code is `ineligible`, and only an eligible proof can construct a scorecard.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from runner.evaluator.core.canonical import (
    MAX_SAFE_INTEGER,
    digest,
    fast_canonical_bytes,
    fast_digest,
)
from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.records import EnvironmentRecorded
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import Slot, stratum_key
from runner.evaluator.protocol.runfile import RunProtocol, consistency_problems

from .outcomes import Positioned, TerminalRecord, group_attempts, terminal_record

PROOF_SCHEMA = "afb.proof/2"
VALID = frozenset({Status.COMPLETED, Status.FAILED, Status.SUBJECT_PRE_TRIGGER_FAILURE})


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StratumCoverage(Frozen):
    registered: int
    witnessed: int  # cells whose terminal record is a valid subject outcome


class Coverage(Frozen):
    registered: int
    witnessed: int
    floor_percent: int
    strata: dict[str, StratumCoverage]


class EligibilityProof(Frozen):
    schema_version: Literal["afb.proof/2"] = Field(default="afb.proof/2", alias="schema")
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


# ------------------------------------------------------------------------------ evidence root


def _cell_id(slot_id: str, subject_hash: str) -> str:
    """`matrix.cell_id`, through the fast encoder (same bytes, same digest)."""
    return fast_digest({"slot": slot_id, "subject": subject_hash})


def evidence_root(leaves: Iterable[str]) -> str:
    """Order-independent root: SHA-256 over the sorted leaf digests, one per line."""
    h = hashlib.sha256(b"afb.evidence-root/1\n")
    for leaf in sorted(leaves):
        h.update(leaf.encode() + b"\n")
    return "sha256:" + h.hexdigest()


def leaf(at_ns: str, record: dict[str, Any]) -> str:
    """Each record with its own timestamp; seq and prev are positions, left out on purpose.

    Reading a journal computes the same digest from the line's bytes (`journal.line_leaf`).
    """
    return fast_digest({"at_ns": at_ns, "record": record})


def terminal_line(record: TerminalRecord) -> bytes:
    """RFC 8785 bytes of a terminal record's JSON form (`canonical_bytes(r.model_dump(...))`).

    TerminalRecord and AttemptVerdict declare their fields in sorted order and hold only
    strings, booleans, nulls, enums, lists of strings and integers, so pydantic's compact JSON
    writes the canonical bytes: members in order, the same string escapes as RFC 8785 (only
    `"`, `\\` and controls below 0x20; everything else literally, as UTF-8), integers as decimal
    digits once each is known to be within +-(2^53-1). Anything else takes the checked path.
    """
    ints = (record.intended_effects, record.committed_effects, record.tool_calls)
    if all(v is None or -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER for v in ints) and all(
        -MAX_SAFE_INTEGER <= a.attempt <= MAX_SAFE_INTEGER for a in record.attempts
    ):
        try:
            return record.__pydantic_serializer__.to_json(record)
        except ValueError:  # e.g. a lone surrogate: the checked path names it
            pass
    return fast_canonical_bytes(record.model_dump(mode="json"))


TERMINAL_RECORDS_DOMAIN = b"afb.terminal-records/2\n"


def terminal_records_hash(records: Iterable[TerminalRecord]) -> str:
    """SHA-256 over the domain tag and the records' canonical lines in cell-id order, each
    ended by a newline: a subject's terminal-records.jsonl, hashed. Independent of the order the
    records are given in (a subject's cell ids are unique), and computable as a stream when they
    arrive in cell-id order, as `decide_subject` receives them."""
    return jsonl_hash(b"".join(terminal_line(r) + b"\n" for r in sorted(records, key=_by_cell)))


def _by_cell(record: TerminalRecord) -> str:
    return record.cell_id


def jsonl_hash(jsonl: bytes) -> str:
    """`terminal_records_hash` of records given as their terminal-records.jsonl bytes."""
    h = hashlib.sha256(TERMINAL_RECORDS_DOMAIN)
    h.update(jsonl)  # not concatenated: no second copy of a large subject's records
    return "sha256:" + h.hexdigest()


# ------------------------------------------------------------------------------------ loading


class LoadedEvidence:
    """A run's evidence, read once: positioned records and their evidence root."""

    def __init__(self, entries: list[Positioned], root: str, env: list[EnvironmentRecorded]):
        self.entries = entries
        self.evidence_root_hash = root
        self.environment = env

    @classmethod
    def from_store(cls, store: EvidenceStore) -> LoadedEvidence:
        entries: list[Positioned] = []
        leaves: list[str] = []
        env: list[EnvironmentRecorded] = []
        for journal, entry in store.entries():
            entries.append((journal, entry.seq, entry.record))
            leaves.append(entry.leaf)
            if isinstance(entry.record, EnvironmentRecorded):
                env.append(entry.record)
        return cls(entries, evidence_root(leaves), env)


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

    def terminal_lines(self) -> Iterator[bytes]:
        """Each record's canonical line, without its newline, in cell-id order."""
        for line in io.BytesIO(self.terminal_jsonl):
            yield line[:-1]

    @property
    def terminal_records(self) -> list[TerminalRecord]:
        return [TerminalRecord.model_validate_json(line) for line in self.terminal_lines()]


class EnvironmentCheck(NamedTuple):
    """What the environment conformance check concluded about a run."""

    proof_hash: str | None
    execution_environment_hash: str | None
    reasons: list[str]
    proof: dict[str, Any] | None = None  # the conformance proof document, written with results


NO_ENVIRONMENT = EnvironmentCheck(None, None, [])


def evaluate_run(
    rp: RunProtocol,
    evidence: LoadedEvidence,
    current_evaluator_digest: str,
    environment_check: EnvironmentCheck = NO_ENVIRONMENT,
) -> dict[str, SubjectEvaluation]:
    """Decide every subject of the run. Deterministic in the evidence's content."""
    spec = rp.spec()
    ids = rp.identities
    run_reasons: list[str] = []
    problems = consistency_problems(rp)
    if problems:
        run_reasons.append("protocol_inconsistent")
    frozen = rp.freeze_record is not None and rp.freeze_record.protocol_hash == ids.protocol_hash
    if spec.eligibility.require_frozen and not frozen:
        run_reasons.append("protocol_draft")
    if current_evaluator_digest != ids.evaluator_digest:
        run_reasons.append("evaluator_mismatch")
    slot_counts = Counter(s.slot_id for s in rp.slots)
    if any(n > 1 for n in slot_counts.values()):
        run_reasons.append("duplicate_cell")
    env_proof, env_hash, env_reasons, _ = environment_check
    run_reasons += env_reasons

    grouped = group_attempts(evidence.entries)
    registered: dict[str, tuple[str, Slot]] = {}
    for subject_id, shash in sorted(ids.subject_config_hashes.items()):
        for slot in rp.slots:
            registered[_cell_id(slot.slot_id, shash)] = (subject_id, slot)
    if any(c not in registered for c in grouped):
        run_reasons.append("unregistered_cell")
    # One sort for every subject; each subject's cells keep cell-id order.
    by_subject: dict[str, list[tuple[str, Slot]]] = defaultdict(list)
    for cid, (sid, slot) in sorted(registered.items()):
        by_subject[sid].append((cid, slot))
    del registered

    contracts = rp.contract_map()

    def terminals(subject_id: str) -> Iterator[TerminalRecord]:
        # One cell at a time: only its line outlives it.
        for cid, slot in by_subject.pop(subject_id, []):
            yield terminal_record(
                cid,
                slot.slot_id,
                subject_id,
                slot.stratum,
                slot.schedule.kind,
                slot.schedule.parameters,
                grouped.pop(cid, None),
                spec.attempts,
                contracts.get(slot.schedule.kind),
                spec.scoring.scorer_version,
            )

    out: dict[str, SubjectEvaluation] = {}
    for subject_id, shash in sorted(ids.subject_config_hashes.items()):
        out[subject_id] = decide_subject(
            rp, subject_id, shash, terminals(subject_id), run_reasons,
            evidence.evidence_root_hash, frozen, current_evaluator_digest, env_proof, env_hash,
        )  # fmt: skip
    return out


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
    spec = rp.spec()
    ids = rp.identities
    reasons = set(run_reasons)
    floor = spec.eligibility.witnessed_coverage_floor_percent
    strata: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    invalid_attempts: dict[str, int] = defaultdict(int)
    buf = bytearray()
    previous = ""
    for t in terminals:
        if t.cell_id <= previous:
            raise ValueError(
                "terminal records must arrive in cell-id order, each once: "
                f"{t.cell_id} after {previous}"
            )
        previous = t.cell_id
        buf += terminal_line(t)
        buf += b"\n"
        counts = strata[t.stratum]
        counts[0] += 1
        if t.status in VALID:
            counts[1] += 1
        elif t.status is None:
            reasons.add("missing_cells")
        else:
            reasons.add(t.status.value.lower())
            if t.status is Status.SCENARIO_MISMATCH:
                reasons.add(f"scenario_mismatch_stratum:{t.stratum}")
            last = t.attempts[-1].reasons if t.attempts else []
            reasons.update(last)
        reasons.update(t.reasons)
        n_invalid = sum(1 for a in t.attempts if a.status is Status.INVALID_INJECTION)
        invalid_attempts[t.stratum] = max(invalid_attempts[t.stratum], n_invalid)
    not_comparable = sorted(
        s
        for s, n in invalid_attempts.items()
        if n >= spec.eligibility.not_comparable_after_invalid_attempts
    )
    for s in not_comparable:
        reasons.add(f"not_comparable:{s}")
    # Every stratum the spec's task buckets and fault kinds imply must be present.
    expected = _expected_strata(rp)
    for s in sorted(expected - set(strata)):
        reasons.add(f"missing_stratum:{s}")
    registered = sum(v[0] for v in strata.values())
    witnessed = sum(v[1] for v in strata.values())
    if registered == 0 or witnessed * 100 < floor * registered:
        reasons.add("coverage_below_floor")
    for s, (reg, wit) in sorted(strata.items()):
        if wit * 100 < floor * reg:
            reasons.add(f"stratum_below_floor:{s}")
    coverage = Coverage(
        registered=registered,
        witnessed=witnessed,
        floor_percent=floor,
        strata={s: StratumCoverage(registered=r, witnessed=w) for s, (r, w) in strata.items()},
    )
    jsonl = bytes(buf)
    del buf
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
            "decision": "ineligible" if reasons else "eligible",
            "reason_codes": sorted(reasons),
        }
    )
    return SubjectEvaluation(proof=proof, terminal_jsonl=jsonl)


def _expected_strata(rp: RunProtocol) -> set[str]:
    spec = rp.spec()
    dims = list(spec.eligibility.strata)
    kinds = {f.kind for f in spec.faults}
    if spec.matrix.baseline:
        kinds.add(NO_FAULT)
    out = set()
    for ts in spec.task_sets:
        # The strata depend on a task only through its bucket: one representative per bucket.
        for t in {t.bucket: t for t in ts.tasks}.values():
            for k in kinds:
                fault_ok = k == NO_FAULT or any(
                    f.kind == k
                    and (f.applies_to.task_sets is None or ts.id in f.applies_to.task_sets)
                    and (f.applies_to.buckets is None or t.bucket in f.applies_to.buckets)
                    for f in spec.faults
                )
                if fault_ok:
                    out.add(stratum_key(dims, k, t.bucket))
    return out
