"""`bench reproduce --rerun` names exactly the cells whose deterministic projection differs.

The projection lines are sorted by content, so a cell whose status changed moves to another
position: a positional comparison would report every line after it (a real rerun of
swe-lite-agents reported 37 differing cells for one). Cells are matched by id."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from runner.evaluator.core.canonical import canonical_bytes
from runner.orchestrate import differing_cells


def _line(cell: int, status: str, calls: int = 5) -> bytes:
    body = {"attempts": [{"attempt": 1, "status": status}], "cell_id": f"sha256:{cell:064x}",
            "status": status, "tool_calls": calls}  # fmt: skip
    return canonical_bytes(body)


def test_one_changed_cell_is_one_difference() -> None:
    published = sorted(_line(i, "COMPLETED") for i in range(40))
    again = sorted([_line(0, "FAILED"), *(_line(i, "COMPLETED") for i in range(1, 40))])
    (only,) = differing_cells(published, again)
    assert only.startswith(f"sha256:{0:064x}: published ") and '"FAILED"' in only


def test_a_missing_or_extra_cell_is_named() -> None:
    published = sorted(_line(i, "COMPLETED") for i in range(3))
    again = sorted([_line(0, "COMPLETED"), _line(1, "COMPLETED"), _line(7, "COMPLETED")])
    diffs = differing_cells(published, again)
    assert [d.split(":")[1] for d in diffs] == [f"{2:064x}", f"{7:064x}"]
    assert "again None" in diffs[0] and "published None" in diffs[1]


@given(
    st.lists(st.tuples(st.sampled_from(["COMPLETED", "FAILED"]), st.integers(0, 20)),
             min_size=1, max_size=30),
    st.sets(st.integers(0, 29)),
)  # fmt: skip
def test_exactly_the_changed_cells_are_reported(cells: list, changed: set[int]) -> None:
    published = sorted(_line(i, s, c) for i, (s, c) in enumerate(cells))
    again = sorted(_line(i, s, c + (1 if i in changed else 0)) for i, (s, c) in enumerate(cells))
    got = {json.loads(d.split(": published ")[1].split(", again ")[0][2:-1])["cell_id"]
           for d in differing_cells(published, again)}  # fmt: skip
    assert got == {f"sha256:{i:064x}" for i in changed if i < len(cells)}
