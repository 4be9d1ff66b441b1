"""`protocol.json` of a run directory: everything the evaluator needs besides the journals.

It is written once when a run starts (canonical bytes), and holds the spec text, the resolved
slots, the witness contracts and the freeze record, so a run directory can be evaluated and
verified on any machine from its own contents. The evaluator re-derives every hash it can from
these contents and refuses a file whose recorded identities do not match.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterator
from pathlib import Path

from runner.evaluator.core.canonical import digest, fast_canonical_bytes, fast_digest
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.types import Frozen

from .freeze import FreezeRecord
from .identities import Identities, policy_body
from .matrix import Slot, cell_set_hash, matrix_hash, subject_hashes
from .spec import Spec
from .witness import WitnessContract, contracts_hash

PROTOCOL_FILE = "protocol.json"


class RunProtocol(Frozen):
    schema_version: str = "afb.run-protocol/1"
    run_id: str
    spec_name: str
    spec_text: str
    identities: Identities
    slots: list[Slot]
    contracts: list[WitnessContract]
    freeze_record: FreezeRecord | None

    def spec(self) -> Spec:
        return _parse_spec(self.spec_text)

    def contract_map(self) -> dict[str, WitnessContract]:
        return {c.kind: c for c in self.contracts}


@functools.lru_cache(maxsize=4)
def _parse_spec(text: str) -> Spec:
    # A pure function of the text; the Spec is frozen, so every caller may share one parse
    # (the evaluator asks for it several times per subject). Errors are not cached: they re-raise.
    return Spec.model_validate(tomllib.loads(text))


def canonical_pieces(rp: RunProtocol) -> Iterator[bytes]:
    """protocol.json's RFC 8785 bytes in pieces, one slot at a time: the slots are the bulk of a
    big matrix's protocol, and neither writing nor checking it needs the whole document as Python
    objects. The members are in key order (ASCII keys: plain string order is RFC 8785 order)."""
    head = rp.model_dump(mode="json", by_alias=True, exclude={"slots"})
    before = fast_canonical_bytes({k: v for k, v in head.items() if k < "slots"})
    after = fast_canonical_bytes({k: v for k, v in head.items() if k > "slots"})
    yield (before[:-1] + b"," if len(before) > 2 else b"{") + b'"slots":['
    for n, slot in enumerate(rp.slots):
        if n:
            yield b","
        yield fast_canonical_bytes(slot.model_dump(mode="json", by_alias=True))
    yield b"]" + (b"," + after[1:] if len(after) > 2 else b"}")


def write_protocol(run_dir: Path, rp: RunProtocol) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / PROTOCOL_FILE
    data = b"".join(canonical_pieces(rp))
    if path.exists():
        if path.read_bytes() != data:
            raise EvidenceError(f"{path} exists with another protocol; use a new run directory")
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def read_protocol(run_dir: Path) -> RunProtocol:
    path = run_dir / PROTOCOL_FILE
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EvidenceError(f"{path}: missing ({exc.strerror})") from exc
    try:
        rp = RunProtocol.model_validate_json(raw)
    except ValueError as exc:
        raise EvidenceError(f"{path}: not a valid run protocol: {exc}") from exc
    # The file must be the canonical bytes of what was parsed, which a duplicate key, a NaN,
    # a coerced value or any non-canonical spelling cannot be. Compared piece by piece.
    pos = 0
    try:
        for piece in canonical_pieces(rp):
            if not raw.startswith(piece, pos):
                raise EvidenceError(f"{path}: not in canonical form (edited?)")
            pos += len(piece)
    except ValueError as exc:
        raise EvidenceError(f"{path}: not a valid run protocol: {exc}") from exc
    if pos != len(raw):
        raise EvidenceError(f"{path}: not in canonical form (edited?)")
    return rp


def consistency_problems(rp: RunProtocol) -> list[str]:
    """Re-derive what can be re-derived from the file itself; name every mismatch."""
    problems: list[str] = []
    ids = rp.identities
    try:
        spec = rp.spec()
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        return [f"spec_text does not parse: {exc}"]
    if digest(policy_body(spec)) != ids.policy_hash:
        problems.append("policy_hash does not match the spec's policy")
    if matrix_hash(spec, rp.slots) != ids.matrix_hash:
        problems.append("matrix_hash does not match the spec and slots")
    if subject_hashes(spec) != ids.subject_config_hashes:
        problems.append("subject_config_hashes do not match the spec")
    contracts = {c.kind: c for c in rp.contracts}
    if contracts_hash(contracts) != ids.witness_contracts_hash:
        problems.append("witness_contracts_hash does not match the contracts")
    for slot in rp.slots:
        body = {
            "task": slot.task_id,
            "task_set": slot.task_set,
            "seed": slot.seed,
            "kind": slot.schedule.kind,
            "trigger": slot.schedule.trigger,
            "parameters": slot.schedule.parameters,
        }
        if fast_digest(body) != slot.slot_id:
            problems.append(f"slot {slot.slot_id} does not match its content")
            break
    root = digest(
        {
            "schema": "afb.protocol/1",
            "protocol_id": ids.protocol_id,
            "protocol_version": ids.protocol_version,
            "matrix_hash": ids.matrix_hash,
            "policy_hash": ids.policy_hash,
            "evaluator_digest": ids.evaluator_digest,
            "witness_contracts_hash": ids.witness_contracts_hash,
            "task_grader_identity": ids.task_grader_identity,
            "controlled_factors_hash": ids.controlled_factors_hash,
        }
    )
    if root != ids.protocol_hash:
        problems.append("protocol_hash is not the root of the recorded identities")
    if cell_set_hash([s.slot_id for s in rp.slots]) != ids.cell_set_hash:
        problems.append("cell_set_hash does not match the slots")
    fr = rp.freeze_record
    if fr is not None:
        if fr.protocol_hash != ids.protocol_hash:
            problems.append("freeze record binds another protocol_hash")
        if fr.record_hash != fr.body_digest():
            problems.append("freeze record is not sealed by its own hash (edited?)")
        if fr.identities != ids:
            problems.append("freeze record names other identities than the run")
    return problems
