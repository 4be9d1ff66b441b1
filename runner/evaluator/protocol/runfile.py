"""`protocol.json` of a run directory: everything the evaluator needs besides the journals.

It is written once when a run starts (canonical bytes), and holds the spec text, the resolved
slots, the witness contracts and the freeze record, so a run directory can be evaluated and
verified on any machine from its own contents. The evaluator re-derives every hash it can from
these contents and refuses a file whose recorded identities do not match.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pydantic_core
from pydantic import Field

from runner.evaluator.core.bounded import PROTOCOL_CAP, check_path, read_bounded
from runner.evaluator.core.canonical import digest, fast_canonical_bytes, fast_digest
from runner.evaluator.core.errors import EvidenceError, shorten
from runner.evaluator.core.types import Frozen

from .freeze import FreezeRecord
from .identities import Identities, controlled_factors_body, policy_body
from .matrix import Slot, cell_set_hash, matrix_hash, subject_hashes
from .spec import Spec
from .subjects import subject_role
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
    # each subject's role (oracle | agent; protocol/subjects.py `subject_role`); None in a
    # protocol.json written before roles were recorded: then left out of the document, so its
    # bytes stay what they were
    subject_roles: dict[str, Literal["oracle", "agent"]] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )

    def spec(self) -> Spec:
        return _parse_spec(self.spec_text)

    def contract_map(self) -> dict[str, WitnessContract]:
        return {c.kind: c for c in self.contracts}


@functools.lru_cache(maxsize=4)
def _parse_spec(text: str) -> Spec:
    # A pure function of the text; the Spec is frozen, so every caller may share one parse
    # (the evaluator asks for it several times per subject). Errors are not cached: they re-raise.
    # The spec text is evidence here (it was checked when the run began): a text that no longer
    # parses is damaged evidence, an EvidenceError, whoever asks.
    try:
        return Spec.model_validate(tomllib.loads(text))
    except (ValueError, RecursionError) as exc:
        raise EvidenceError(f"spec_text does not parse: {shorten(str(exc), 500)}") from exc


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


def parse_protocol(raw: bytes) -> RunProtocol:
    """`RunProtocol.model_validate_json(raw)`, in a fraction of its memory and time for a big
    matrix (250,000 slots: about 1.6 GB and 25 s that way).

    The slots are the bulk; in canonical bytes each is an object that starts `{"bucket":`, and
    `},{"bucket":` cannot occur inside a string (a quote in a string is escaped). So the slots
    are validated one at a time, and the values they repeat are shared (`_share`). Anything that
    does not split that way, or does not validate, goes the plain way (which names the error);
    `read_protocol` then holds the result against the file's bytes, piece by piece, as ever.
    """
    from .matrix import Schedule

    start = raw.find(b',"slots":[{"bucket":')
    end = raw.rfind(b'}],"spec_name":')
    if start < 0 or end < start:
        return RunProtocol.model_validate_json(raw)
    try:
        head = RunProtocol.model_validate_json(raw[: start + 10] + raw[end + 1 :])
        shared: dict[Any, Any] = {}
        slots: list[Slot] = []
        sep = b'},{"bucket":'
        pos = start + 10
        while pos <= end:
            nxt = raw.find(sep, pos, end + 1)
            stop = end + 1 if nxt < 0 else nxt + 1
            piece = raw[pos:stop]
            a = piece.find(b',"schedule":')
            b = piece.rfind(b',"seed":')
            if a < 0 or b < a:
                raise ValueError("slot without its schedule")
            sched = piece[a + 12 : b]
            schedule = Schedule.model_validate_json(sched)
            fields = pydantic_core.from_json(piece[:a] + piece[b:])
            if type(fields) is not dict or "schedule" in fields:
                raise ValueError("not a slot")
            fields["schedule"] = schedule
            slot = Slot.model_validate(fields)
            _share(schedule, shared)
            _share(slot, shared)
            slots.append(slot)
            pos = stop + 1
    except ValueError:
        return RunProtocol.model_validate_json(raw)  # the plain way names the error
    return head.model_copy(update={"slots": slots})


def _share(model: Frozen, shared: dict[Any, Any]) -> None:
    """Replace a validated frozen model's field values and field set by equal ones seen before
    (an equal value is the same value; nothing can tell them apart, frozen as they are). Most
    slots repeat their task set, bucket, stratum, fault kind, trigger and parameters, and every
    one has the same field set: shared, a slot costs a third of the memory."""
    d = model.__dict__
    for k, v in d.items():
        if (type(v) is str and len(v) <= 64) or type(v) is dict:
            key = (type(v), pydantic_core.to_json(v))
            seen = shared.setdefault(key, v)
            if seen is not v and seen == v:
                d[k] = seen
    fs = frozenset(model.__pydantic_fields_set__)
    object.__setattr__(model, "__pydantic_fields_set__", shared.setdefault(fs, fs))


def read_protocol(run_dir: Path) -> RunProtocol:
    path = run_dir / PROTOCOL_FILE
    check_path(path, evidence=True)
    if not os.path.lexists(path):
        raise EvidenceError(f"{path}: missing (No such file or directory)")
    # a regular file (not a symlink, FIFO, ...) of bounded size, read without blocking
    raw = read_bounded(path, PROTOCOL_CAP, evidence=True, starts=b'{"')  # canonical: an object
    try:
        rp = parse_protocol(raw)
    except ValueError as exc:
        raise EvidenceError(f"{path}: not a valid run protocol: {shorten(str(exc), 500)}") from exc
    # The file must be the canonical bytes of what was parsed, which a duplicate key, a NaN,
    # a coerced value or any non-canonical spelling cannot be. Compared piece by piece.
    pos = 0
    try:
        for piece in canonical_pieces(rp):
            if not raw.startswith(piece, pos):
                raise EvidenceError(f"{path}: not in canonical form (edited?)")
            pos += len(piece)
    except ValueError as exc:
        raise EvidenceError(f"{path}: not a valid run protocol: {shorten(str(exc), 500)}") from exc
    if pos != len(raw):
        raise EvidenceError(f"{path}: not in canonical form (edited?)")
    return rp


def subject_roles(spec: Spec) -> dict[str, Literal["oracle", "agent"]]:
    """Each subject's role (oracle | agent), as protocol.json records it."""
    return {s.id: subject_role(s.agent) for s in spec.subjects}


def consistency_problems(rp: RunProtocol) -> list[str]:
    """Re-derive what can be re-derived from the file itself; name every mismatch."""
    problems: list[str] = []
    ids = rp.identities
    try:
        spec = rp.spec()
    except EvidenceError as exc:
        return [str(exc)]
    if rp.schema_version != "afb.run-protocol/1":
        problems.append(f"schema_version {shorten(repr(rp.schema_version))}: not the known one")
    if (spec.protocol.id, spec.protocol.version) != (ids.protocol_id, ids.protocol_version):
        problems.append("protocol_id / protocol_version do not match the spec")
    if digest(controlled_factors_body(spec)) != ids.controlled_factors_hash:
        problems.append("controlled_factors_hash does not match the spec")
    if digest(policy_body(spec)) != ids.policy_hash:
        problems.append("policy_hash does not match the spec's policy")
    if matrix_hash(spec, rp.slots) != ids.matrix_hash:
        problems.append("matrix_hash does not match the spec and slots")
    if subject_hashes(spec) != ids.subject_config_hashes:
        problems.append("subject_config_hashes do not match the spec")
    if rp.subject_roles is not None and rp.subject_roles != subject_roles(spec):
        problems.append("subject_roles do not match the spec's subjects' adapters")
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
        if slot.replicate:  # matrix.iter_slots: replicate r > 0 is bound into its slot id
            body["replicate"] = slot.replicate
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
        if (fr.protocol_id, fr.protocol_version) != (ids.protocol_id, ids.protocol_version):
            problems.append("freeze record names another protocol_id / protocol_version")
        first = fr.type == "freeze"  # the first record of a log has no parent, an amendment one
        if (
            first != (fr.parent_protocol_hash is None)
            or fr.parent_protocol_hash == fr.protocol_hash
        ):
            problems.append(f"freeze record of type {fr.type!r} with an impossible parent")
    return problems
