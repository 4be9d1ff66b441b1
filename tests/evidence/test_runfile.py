"""protocol.json: written and checked piece by piece, refused when edited in any way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.protocol.runfile import PROTOCOL_FILE, canonical_pieces, read_protocol
from tests.evidence.synth import Run


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path / "run")


def test_pieces_are_the_reference_canonical_bytes_of_the_whole_document(run: Run) -> None:
    whole = canonical_bytes(run.protocol.model_dump(mode="json", by_alias=True))
    assert b"".join(canonical_pieces(run.protocol)) == whole
    assert (run.run_dir / PROTOCOL_FILE).read_bytes() == whole
    assert read_protocol(run.run_dir) == run.protocol


def _rewrite(run: Run, edit) -> None:  # type: ignore[no-untyped-def]
    path = run.run_dir / PROTOCOL_FILE
    path.write_bytes(edit(path.read_bytes()))


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda b: b + b"\n", id="trailing-newline"),
        pytest.param(lambda b: b.replace(b'{"bucket"', b'{ "bucket"', 1), id="whitespace"),
        pytest.param(lambda b: b.replace(b'"seed":1', b'"seed":1.0', 1), id="number-spelling"),
        pytest.param(
            lambda b: b.replace(b'"run_id":"test"', b'"run_id":"x","run_id":"test"', 1),
            id="duplicate-key-in-place",
        ),
        pytest.param(
            lambda b: json.dumps(json.loads(b), sort_keys=False).encode(), id="reformatted"
        ),
    ],
)
def test_a_non_canonical_protocol_is_refused(run: Run, edit) -> None:  # type: ignore[no-untyped-def]
    _rewrite(run, edit)
    with pytest.raises(EvidenceError, match=r"canonical form|not a valid run protocol"):
        read_protocol(run.run_dir)


def test_an_edited_slot_is_refused_by_consistency(run: Run) -> None:
    from runner.evaluator.protocol.runfile import consistency_problems

    _rewrite(run, lambda b: b.replace(b'"seed":1', b'"seed":2', 1))
    rp = read_protocol(run.run_dir)  # still canonical JSON ...
    assert any("slot" in p or "matrix_hash" in p for p in consistency_problems(rp))  # ... not ours


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        # outside the protocol-hash root, so only a re-derivation catches it
        (lambda d: d["identities"].update(cell_set_hash="sha256:" + "1" * 64), "cell_set_hash"),
        # the freeze record's seal and the identities it froze
        (lambda d: d["freeze_record"].update(reason="edited"), "not sealed"),
        (
            lambda d: d["freeze_record"]["identities"].update(cell_set_hash="sha256:" + "2" * 64),
            "other identities",
        ),
    ],
    ids=["cell-set-hash", "freeze-seal", "freeze-identities"],
)
def test_fields_outside_the_root_are_rederived(run: Run, edit, problem: str) -> None:  # type: ignore[no-untyped-def]
    from runner.evaluator.protocol.runfile import consistency_problems

    assert consistency_problems(read_protocol(run.run_dir)) == []

    def rewrite(raw: bytes) -> bytes:
        doc = json.loads(raw)
        edit(doc)
        return canonical_bytes(doc)

    _rewrite(run, rewrite)
    found = consistency_problems(read_protocol(run.run_dir))
    assert any(problem in p for p in found), found
