"""Identity vectors (vectors/identity/*.json): the protocol identities and cell ids of two specs,
computed with a FIXED evaluator digest (not the tree's), so they change only when the spec
language, the hashing rules, the witness contracts or the task files change: each a protocol
change worth a deliberate regeneration (and a word why in the commit)."""

from __future__ import annotations

import json
from pathlib import Path

from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec

FIXED_EVALUATOR = "sha256:" + "0" * 64


def identity_specs(root: Path) -> dict[str, Path]:
    """vector name -> spec it is computed from."""
    here = root / "vectors" / "identity"
    return {"example": root / "specs" / "example.toml", "small": here / "small.toml"}


def identity_vector(spec_path: Path, root: Path) -> dict[str, object]:
    spec = load_spec(spec_path)
    matrix = resolve(spec)
    ids = compute(spec, spec_path, matrix, evaluator=FIXED_EVALUATOR)
    return {
        "spec": spec_path.relative_to(root).as_posix(),
        "evaluator_override": FIXED_EVALUATOR,
        "identities": ids.model_dump(mode="json"),
        "cells": matrix.cell_count,
        "cell_ids": sorted(c.cell_id for c in matrix.cells()),
    }


def render(vector: dict[str, object]) -> str:
    return json.dumps(vector, indent=2, sort_keys=True) + "\n"


def files(root: Path) -> dict[str, str]:
    """vectors/identity/: file name -> text."""
    return {
        f"{name}.json": render(identity_vector(spec, root))
        for name, spec in identity_specs(root).items()
    }
