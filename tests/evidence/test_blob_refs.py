"""The one table of record fields that name blobs (records.BLOB_FIELDS): every field is a digest
field of its record type, `blob_refs` returns what a record names, and the cassette fields of
`attempt_ended` leave the written form of earlier journals alone."""

from __future__ import annotations

import typing

import pydantic_core

from runner.evaluator.evidence import layout
from runner.evaluator.evidence.records import (
    BLOB_FIELDS,
    RECORD_ADAPTER,
    AttemptEnded,
    Record,
    blob_refs,
)

CELL = "sha256:" + "c" * 64
A, B, C = ("sha256:" + x * 64 for x in "abd")


def test_every_blob_field_is_a_digest_field_of_its_record_type() -> None:
    union = typing.get_args(Record)[0]  # Annotated[A | B | ..., discriminator]
    by_type = {cls.model_fields["type"].default: cls for cls in typing.get_args(union)}
    for kind, fields in BLOB_FIELDS.items():
        for f in fields:
            info = by_type[kind].model_fields[f]
            assert "^sha256:[0-9a-f]{64}$" in repr((info.annotation, info.metadata)), (kind, f)
    assert set(BLOB_FIELDS["attempt_ended"]) == {"ledger", "served_cassette", "recorded_cassette"}


def test_blob_refs_names_every_set_field_in_order() -> None:
    end = AttemptEnded(
        cell_id=CELL, attempt=1, outcome="subject_finished", trigger_reached=False, wall_ns="1",
        ledger=A, served_cassette=B, recorded_cassette=C,
    )  # fmt: skip
    assert blob_refs(end) == [A, B, C]
    bare = AttemptEnded(
        cell_id=CELL, attempt=1, outcome="subject_finished", trigger_reached=False, wall_ns="1"
    )
    assert blob_refs(bare) == []


def test_unset_cassette_fields_keep_the_earlier_written_form() -> None:
    bare = AttemptEnded(
        cell_id=CELL, attempt=1, outcome="subject_finished", trigger_reached=False, wall_ns="1",
        ledger=A,
    )  # fmt: skip
    body = bare.model_dump(mode="json")
    assert "served_cassette" not in body and "recorded_cassette" not in body
    assert body["ledger"] == A
    served = bare.model_copy(update={"served_cassette": B})
    assert served.model_dump(mode="json")["served_cassette"] == B
    line = pydantic_core.to_json(served.model_dump(mode="json"))
    assert RECORD_ADAPTER.validate_json(line) == served


def test_the_layout_needles_cover_every_blob_field() -> None:
    """A line naming a cassette is among the lines the layout check parses for references."""
    wanted = {f'"{f}":"sha256:'.encode() for fs in BLOB_FIELDS.values() for f in fs}
    assert set(layout._NEEDLES) == wanted
