"""A journal line is accepted only in exactly the form the writer writes: the evidence-root leaf
is cut from its bytes (journal.line_leaf), so anything else could commit to what was not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evaluator.core.canonical import canonical_bytes, sha256_digest
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence.journal import line_leaf, read_journal
from runner.evaluator.evidence.records import AttemptEnded, GraderResult

CELL = "sha256:" + "c" * 64
ENDED = AttemptEnded(
    cell_id=CELL, attempt=1, outcome="subject_finished", trigger_reached=False, wall_ns="5"
).model_dump(mode="json")


GRADE_WITHOUT_DEFAULT = {
    k: v
    for k, v in GraderResult(
        cell_id=CELL, attempt=1, grader_id="g", grader_version="1", scorer_version="1",
        completed=True, intended_effects=1, committed_effects=1, shape_ok=True,
    ).model_dump(mode="json").items()
    if k != "shape_failures"
}  # fmt: skip


def _write(tmp_path: Path, envelopes: list[dict]) -> Path:  # type: ignore[type-arg]
    path = tmp_path / "j.jsonl"
    prev = None
    out = b""
    for env in envelopes:
        line = canonical_bytes({"prev": prev, **env})
        out += line + b"\n"
        prev = sha256_digest(line)
    path.write_bytes(out)
    return path


def test_a_written_form_line_reads_and_its_leaf_is_cut_from_it(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"seq": 1, "at_ns": "17", "record": ENDED}])
    (entry,) = read_journal(path)
    assert entry.record.model_dump(mode="json") == ENDED
    assert entry.leaf == line_leaf(path.read_bytes()[:-1])


@pytest.mark.parametrize(
    "env",
    [
        # An object as at_ns could hide ',"prev":' / ',"record":' and move line_leaf's cut: two
        # different lines would share a leaf. Rejected before any leaf is cut.
        pytest.param(
            {"seq": 1, "at_ns": {"a": ',"prev":null,"record":{}'}, "record": ENDED},
            id="at_ns-object",
        ),
        pytest.param({"seq": 1, "at_ns": 17, "record": ENDED}, id="at_ns-number"),
        pytest.param({"seq": 1, "at_ns": "1.5", "record": ENDED}, id="at_ns-not-digits"),
        pytest.param({"seq": 1, "at_ns": "", "record": ENDED}, id="at_ns-empty"),
        pytest.param({"seq": True, "at_ns": "17", "record": ENDED}, id="seq-bool"),
        pytest.param({"seq": 1, "at_ns": "17", "record": [ENDED]}, id="record-not-object"),
    ],
)
def test_an_envelope_member_of_the_wrong_type_is_refused(tmp_path: Path, env: dict) -> None:  # type: ignore[type-arg]
    path = _write(tmp_path, [env])
    with pytest.raises(EvidenceError, match="wrong type"):
        list(read_journal(path))


def test_a_prev_that_is_not_a_digest_is_refused(tmp_path: Path) -> None:
    line = canonical_bytes({"seq": 1, "prev": "x", "at_ns": "17", "record": ENDED})
    path = tmp_path / "j.jsonl"
    path.write_bytes(line + b"\n")
    with pytest.raises(EvidenceError, match="wrong type"):
        list(read_journal(path))


@pytest.mark.parametrize(
    "record",
    [
        pytest.param({**ENDED, "attempt": "1"}, id="coerced-int"),
        pytest.param(GRADE_WITHOUT_DEFAULT, id="omitted-default"),
    ],
)
def test_a_record_not_in_its_written_form_is_refused(tmp_path: Path, record: dict) -> None:  # type: ignore[type-arg]
    # Valid under lax validation, but not what the writer writes (model_dump of the record).
    path = _write(tmp_path, [{"seq": 1, "at_ns": "17", "record": record}])
    with pytest.raises(EvidenceError, match="written form"):
        list(read_journal(path))


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b'{"at_ns":"17","prev":null,"record":{},"seq":NaN}', id="nan"),
        pytest.param(b'{"at_ns":"17","at_ns":"17","prev":null,"record":{},"seq":1}', id="dup-key"),
        pytest.param(b'{"at_ns":"17","prev":null,"record":{"x":"\xff"},"seq":1}', id="bad-utf8"),
        pytest.param(b'\xef\xbb\xbf{"at_ns":"17","prev":null,"record":{},"seq":1}', id="bom"),
        pytest.param(
            b'{"at_ns":"17","prev":null,"record":{},"seq":9007199254740993}', id="big-int"
        ),
        pytest.param(b'{"at_ns":"17", "prev":null,"record":{},"seq":1}', id="space"),
        pytest.param(b"[1,2]", id="not-object"),
    ],
)
def test_a_line_that_is_not_canonical_json_is_refused(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(line + b"\n")
    with pytest.raises(EvidenceError):
        list(read_journal(path))
