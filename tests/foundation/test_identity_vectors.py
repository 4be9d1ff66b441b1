"""Identity known-answer vectors (vectors/identity/*.json), computed with a fixed evaluator digest.

If one of these fails, the spec language or a hashing rule changed what a protocol hashes to. If
that was intended, regenerate with `bench vectors regenerate` and say why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evaluator.protocol.identities import compute, verify
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec
from tests.foundation.helpers import FIXED_EVALUATOR, IDENTITY, REPO

VECTORS = sorted(IDENTITY.glob("*.json"))


def test_there_are_two_vectors() -> None:
    assert [p.stem for p in VECTORS] == ["example", "small"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda p: p.stem)
def test_identity_vector(vector: Path) -> None:
    expected = json.loads(vector.read_text("utf-8"))
    assert expected["evaluator_override"] == FIXED_EVALUATOR
    spec_path = REPO / expected["spec"]
    spec = load_spec(spec_path)
    matrix = resolve(spec)
    ids = compute(spec, spec_path, matrix, evaluator=FIXED_EVALUATOR)
    got = ids.model_dump(mode="json")
    for key in (
        "matrix_hash",
        "policy_hash",
        "witness_contracts_hash",
        "controlled_factors_hash",
        "task_grader_identity",
        "cell_set_hash",
        "subject_config_hashes",
        "protocol_hash",
    ):
        assert got[key] == expected["identities"][key], key
    assert got == expected["identities"]
    assert verify(ids)
    assert matrix.cell_count == expected["cells"]
    assert sorted(c.cell_id for c in matrix.cells()) == expected["cell_ids"]


def test_identities_are_stable_across_runs() -> None:
    spec_path = REPO / "specs" / "example.toml"
    a = compute(load_spec(spec_path), spec_path, evaluator=FIXED_EVALUATOR)
    b = compute(load_spec(spec_path), spec_path, evaluator=FIXED_EVALUATOR)
    assert a == b
