"""Journal records kept as templates, for `journal._fast_line`: a record equal to one already
validated but for its cell id (and slot id) is that one's copy with the ids validated."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel

from .records import Record

# Records equal but for their cell id (and slot id). Most records of a run repeat another cell's
# but for the cell id (lifecycle steps, receipts, counts, grades; a start differs in its slot id
# too): such a record is its template's copy with those ids validated by the model's own
# validator (`validate_assignment`), which is what validating it whole gives, since no record
# type validates one field against another (checked here: no model or field validators; a
# type's own validators see only its value). Its line is canonical as the template's is: the
# same bytes but for digests of the same length, which have no character to escape.
# `_fast_line` checks the line is a template's with other digests at the same places.
_CELL = b'"cell_id":"'
_SLOT = b'"slot_id":"'
_TEMPLATES: dict[bytes, tuple[int, int, Any]] = {}  # line without digests -> (where, record)
TEMPLATES_HELD = 4096
_VALIDATORS_PER_FIELD = not any(
    d.model_validators or d.field_validators or d.validators or d.root_validators
    for d in (m.__pydantic_decorators__ for m in get_args(get_args(Record)[0]))
)


def _cut(r: bytes, c: int, s: int) -> bytes:
    """R without the 71 bytes at c (and at s, when s >= 0; s > c)."""
    if s < 0:
        return r[:c] + r[c + 71 :]
    return r[:c] + r[c + 71 : s] + r[s + 71 :]


def _remember(r: bytes, c: int, s: int, record: Record) -> None:
    """Keep a validated record as a template when its line holds its cell id (and the slot id
    cut at s) exactly once, as the record's own fields (and the record has no extra or private
    state, which `_with_cell`'s copy leaves out)."""
    if not _VALIDATORS_PER_FIELD or c < len(_CELL) or r.count(_CELL) != 1:
        return
    if getattr(record, "cell_id", None) != r[c : c + 71].decode():
        return
    if s >= 0 and (
        r.count(_SLOT) != 1 or getattr(record, "slot_id", None) != r[s : s + 71].decode()
    ):
        return
    if record.__pydantic_extra__ is not None or record.__pydantic_private__ is not None:
        return
    if len(_TEMPLATES) >= TEMPLATES_HELD:
        _TEMPLATES.clear()
    _TEMPLATES[_cut(r, c, s)] = (c, s, record)


# The last cell id the model's validator took, and what it made of it: the records of one
# journal share their cell id, so it is validated once per journal, not once per record (a
# field's validation depends on its value alone: see `_VALIDATORS_PER_FIELD`).
_VALIDATED: list[str | None] = [None, None]
_setattr = object.__setattr__


def _with_cell(template: Any, cell: str, slot: str | None = None) -> Record:
    """`template.model_copy()` with `cell_id` (and `slot_id`) validated and assigned
    (`validate_assignment`): the same `__dict__` (same order), fields set, extra and private
    state (both None, see `_remember`), built directly when `cell` is the id validated last."""
    if cell != _VALIDATED[0]:
        record = template.model_copy()
        record.__pydantic_validator__.validate_assignment(record, "cell_id", cell)
        _VALIDATED[0], _VALIDATED[1] = cell, record.cell_id
    else:
        cls: type[BaseModel] = type(template)
        record = cls.__new__(cls)
        values = template.__dict__.copy()
        values["cell_id"] = _VALIDATED[1]
        _setattr(record, "__dict__", values)
        _setattr(record, "__pydantic_extra__", None)
        _setattr(record, "__pydantic_fields_set__", set(template.__pydantic_fields_set__))
        _setattr(record, "__pydantic_private__", None)
    if slot is not None:
        record.__pydantic_validator__.validate_assignment(record, "slot_id", slot)
    return record  # type: ignore[no-any-return]
