"""Matrix resolution: a spec expands into preregistered cells with their resolved schedule.

A *slot* is (task, fault schedule, seed): what every subject is run against, identical across
subjects. A *cell* is a slot for one subject (DESIGN's (task, subject, fault, seed)). Comparing two
subjects requires the identical slot set, which `cell_set_hash` pins.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import SerializerFunctionWrapHandler, model_serializer

from runner.evaluator.core.canonical import canonical_bytes, digest
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import Frozen

from .faultkinds import NO_FAULT, FaultKind
from .spec import Fault, Spec, Subject


class Schedule(Frozen):
    fault_id: str
    kind: FaultKind
    trigger: dict[str, Any] | None
    parameters: dict[str, Any]
    tie_break: str  # seed-derived; orders coinciding injections, nothing else


class Slot(Frozen):
    slot_id: str
    task_id: str
    task_set: str
    bucket: str
    seed: int
    schedule: Schedule
    stratum: str
    replicate: int = 0  # [matrix] replicates: 0 .. k-1; 0 is absent from the dump (old slots)

    @model_serializer(mode="wrap")
    def _replicate_when_repeated(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("replicate"):
            data.pop("replicate", None)
        return data


class Cell(Frozen):
    cell_id: str
    slot_id: str
    subject_id: str
    subject_config_hash: str
    task_id: str
    bucket: str
    fault_id: str
    kind: FaultKind
    seed: int
    stratum: str


def subject_config_hash(subject: Subject) -> str:
    # The display id is not part of what is varied: two ids with one config are one subject.
    return digest({"schema": "afb.subject/1", "agent": subject.agent, "config": subject.config})


def stratum_key(dims: Sequence[str], kind: str, bucket: str, fault_id: str = NO_FAULT) -> str:
    """`dim=value` pairs in dimension order; `fault_id` is the declared fault's id ("none" for
    the baseline), used only when the spec's strata name it."""
    values = {"fault_id": fault_id, "fault_kind": kind, "task_bucket": bucket}
    return ",".join(f"{d}={values[d]}" for d in sorted(dims)) or "all"


def _schedule_content(fault: Fault | None) -> dict[str, Any]:
    if fault is None:
        return {"kind": NO_FAULT, "trigger": None, "parameters": {}}
    return {
        "kind": fault.kind,
        "trigger": fault.trigger.model_dump(mode="json"),
        "parameters": fault.parameters,
    }


def _tie_break(seed: int, task_id: str, fault_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{task_id}\0{fault_id}".encode()).hexdigest()[:16]


def _applies(fault: Fault, task_set: str, bucket: str) -> bool:
    a = fault.applies_to
    return (a.task_sets is None or task_set in a.task_sets) and (
        a.buckets is None or bucket in a.buckets
    )


def iter_slots(spec: Spec) -> Iterator[Slot]:
    """Slots in a fixed order: task id, then fault id ('none' first), then seed, then replicate.

    Replicate r > 0 of a slot is its own slot (its id binds r) with the same schedule and
    tie-break; replicate 0 is the slot as it was before replicates existed."""
    injected: list[Fault] = sorted(spec.faults, key=lambda f: f.id)
    faults: list[Fault | None] = [None] if spec.matrix.baseline else []
    faults.extend(injected)
    dims = list(spec.eligibility.strata)
    seen: dict[str, str] = {}
    for task_id, (task_set, task) in sorted(spec.task_index().items()):
        for fault in faults:
            if fault is not None and not _applies(fault, task_set.id, task.bucket):
                continue
            fault_id = NO_FAULT if fault is None else fault.id
            content = _schedule_content(fault)
            for seed, rep in (
                (seed, r) for seed in spec.matrix.seeds for r in range(spec.matrix.replicates or 1)
            ):
                body = {"task": task_id, "task_set": task_set.id, "seed": seed, **content}
                if rep:
                    body["replicate"] = rep
                slot_id = digest(body)
                if slot_id in seen:
                    raise InputError(
                        f"duplicate cell: fault {fault_id!r} resolves to the same cell as "
                        f"{seen[slot_id]!r} (same kind, trigger and parameters)",
                        key="faults",
                    )
                seen[slot_id] = fault_id
                yield Slot(
                    slot_id=slot_id,
                    task_id=task_id,
                    task_set=task_set.id,
                    bucket=task.bucket,
                    seed=seed,
                    schedule=Schedule(
                        fault_id=fault_id,
                        kind=content["kind"],
                        trigger=content["trigger"],
                        parameters=content["parameters"],
                        tie_break=_tie_break(seed, task_id, fault_id),
                    ),
                    stratum=stratum_key(dims, content["kind"], task.bucket, fault_id),
                    replicate=rep,
                )


def subject_hashes(spec: Spec) -> dict[str, str]:
    out: dict[str, str] = {}
    by_hash: dict[str, str] = {}
    for i, s in enumerate(spec.subjects):
        h = subject_config_hash(s)
        if h in by_hash:
            raise InputError(
                f"duplicate cells: subject {s.id!r} has the same agent and config as "
                f"{by_hash[h]!r}",
                key=f"subjects[{i}]",
            )
        by_hash[h] = s.id
        out[s.id] = h
    return out


def cell_id(slot_id: str, subject_hash: str) -> str:
    return digest({"slot": slot_id, "subject": subject_hash})


def cells_for(slots: list[Slot], subject_id: str, subject_hash: str) -> Iterator[Cell]:
    for s in slots:
        yield Cell(
            cell_id=cell_id(s.slot_id, subject_hash),
            slot_id=s.slot_id,
            subject_id=subject_id,
            subject_config_hash=subject_hash,
            task_id=s.task_id,
            bucket=s.bucket,
            fault_id=s.schedule.fault_id,
            kind=s.schedule.kind,
            seed=s.seed,
            stratum=s.stratum,
        )


class ResolvedMatrix(Frozen):
    slots: list[Slot]
    subjects: dict[str, str]  # subject id -> subject_config_hash

    def cells(self) -> Iterator[Cell]:
        for sid in sorted(self.subjects):
            yield from cells_for(self.slots, sid, self.subjects[sid])

    @property
    def cell_count(self) -> int:
        return len(self.slots) * len(self.subjects)

    def slot_index(self) -> dict[str, Slot]:
        return {s.slot_id: s for s in self.slots}


def resolve(spec: Spec) -> ResolvedMatrix:
    return ResolvedMatrix(slots=list(iter_slots(spec)), subjects=subject_hashes(spec))


def cell_set_hash(slot_ids: list[str]) -> str:
    """Identity of the registered slot set, independent of order."""
    return digest({"schema": "afb.cellset/1", "slots": sorted(slot_ids)})


def matrix_hash(spec: Spec, slots: list[Slot]) -> str:
    return digest(
        {
            "schema": "afb.matrix/1",
            "tools": sorted(
                (t.model_dump(mode="json", exclude={"description"}) for t in spec.tools),
                key=lambda t: t["name"],
            ),
            "tasks": sorted(
                (
                    {"id": t.id, "set": s.id, "bucket": t.bucket}
                    for s in spec.task_sets
                    for t in s.tasks
                ),
                key=lambda t: t["id"],
            ),
            "faults": sorted(
                (f.model_dump(mode="json") for f in spec.faults), key=lambda f: f["id"]
            ),
            "seeds": list(spec.matrix.seeds),
            "baseline": spec.matrix.baseline,
            "attempt_cap": spec.attempts.cap,
            "slots": sorted(s.slot_id for s in slots),
            # only when repeated: a spec without replicates keeps its matrix hash
            **({"replicates": spec.matrix.replicates} if (spec.matrix.replicates or 1) > 1 else {}),
        }
    )


def canonical_size(slots: list[Slot]) -> int:
    return sum(len(canonical_bytes(s.model_dump(mode="json"))) for s in slots)
