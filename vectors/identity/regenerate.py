"""Write the identity known-answer vectors: `uv run python vectors/identity/regenerate.py`.

Identities are computed with a FIXED evaluator digest (not the tree's), so these vectors change
only when the spec language, the hashing rules, the witness contracts or the task files change —
each of which is a protocol change worth a deliberate regeneration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from runner.evaluator.protocol.identities import compute  # noqa: E402
from runner.evaluator.protocol.matrix import resolve  # noqa: E402
from runner.evaluator.protocol.specload import load_spec  # noqa: E402

FIXED_EVALUATOR = "sha256:" + "0" * 64
SPECS = {"example": REPO / "specs" / "example.toml", "small": HERE / "small.toml"}


def vector(spec_path: Path) -> dict[str, object]:
    spec = load_spec(spec_path)
    matrix = resolve(spec)
    ids = compute(spec, spec_path, matrix, evaluator=FIXED_EVALUATOR)
    return {
        "spec": spec_path.relative_to(REPO).as_posix(),
        "evaluator_override": FIXED_EVALUATOR,
        "identities": ids.model_dump(mode="json"),
        "cells": matrix.cell_count,
        "cell_ids": sorted(c.cell_id for c in matrix.cells()),
    }


def main() -> None:
    for name, path in SPECS.items():
        out = HERE / f"{name}.json"
        out.write_text(json.dumps(vector(path), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
