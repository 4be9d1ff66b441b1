"""core/appendlog.py (the freeze log's and the registry's append and chain) and core/filesets.py
(the one diff of expected against present names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evaluator.core.appendlog import append_record, read_chain
from runner.evaluator.core.canonical import digest
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.filesets import compare_sets
from runner.evaluator.core.types import Frozen


class Rec(Frozen):
    n: int
    previous: str | None


def _read(path: Path) -> list[Rec]:
    odd = lambda r, line, before: "odd" if r.n % 2 else None  # noqa: E731
    return read_chain(path, Rec, lambda r: r.previous, odd, what="rec", chain="rec chain")


def _log(path: Path, ns: list[int]) -> None:
    prev = None
    for n in ns:
        rec = Rec(n=n, previous=prev)
        append_record(path, rec.model_dump(mode="json"))
        prev = digest(rec.model_dump(mode="json"))


def test_a_chain_reads_back_as_appended(tmp_path: Path) -> None:
    log = tmp_path / "x.jsonl"
    _log(log, [0, 2, 4])
    assert log.read_bytes().count(b"\n") == 3
    assert [r.n for r in _read(log)] == [0, 2, 4]


def test_a_dropped_line_an_edit_and_a_damaged_line_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "x.jsonl"
    _log(log, [0, 2, 4])
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(lines[0] + lines[2])
    with pytest.raises(InputError, match="rec chain is broken here"):
        _read(log)
    _log(log := tmp_path / "y.jsonl", [0, 1])
    with pytest.raises(InputError, match="damaged rec: odd"):
        _read(log)
    log.write_bytes(b"{not json\n")
    with pytest.raises(InputError, match="damaged rec"):
        _read(log)


def test_compare_sets_names_each_side_in_order() -> None:
    assert compare_sets(["b", "a", "c"], {"c", "d", "a"}) == [
        ("a", "both"), ("b", "expected"), ("c", "both"), ("d", "present")
    ]  # fmt: skip
    assert compare_sets([], []) == []
