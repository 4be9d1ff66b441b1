"""Hash sharding (`runner.scale.shard`): a partition of any cell set, stable, and `i/N` parsing
that refuses every malformed value with an input error (exit 2), never a traceback."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.matrix import cells_for, resolve
from runner.evaluator.protocol.specload import load_spec
from runner.scale.shard import in_shard, parse_shard, shard_of
from tests.evidence.synth import SPEC_AB

CELL_IDS = st.lists(
    st.binary(min_size=1, max_size=32).map(lambda b: "sha256:" + hashlib.sha256(b).hexdigest())
    | st.text(min_size=0, max_size=40),
    max_size=200,
    unique=True,
)


@settings(max_examples=300, deadline=None)
@given(cells=CELL_IDS, count=st.integers(min_value=1, max_value=64))
def test_shards_partition_every_cell_set(cells: list[str], count: int) -> None:
    shards = [[c for c in cells if in_shard(c, i, count)] for i in range(count)]
    assert sorted(c for s in shards for c in s) == sorted(cells)  # nothing lost or doubled
    for c in cells:
        assert sum(in_shard(c, i, count) for i in range(count)) == 1
        assert in_shard(c, shard_of(c, count), count)


@given(cell=st.text(max_size=80), count=st.integers(min_value=1, max_value=1000))
def test_assignment_is_the_documented_rule(cell: str, count: int) -> None:
    digest = hashlib.sha256(cell.encode()).digest()
    assert shard_of(cell, count) == int.from_bytes(digest[:8], "big") % count


def test_a_real_matrix_spreads_over_two_shards() -> None:
    spec = load_spec(SPEC_AB)
    m = resolve(spec)
    cells = [c.cell_id for c in cells_for(m.slots, "a", "sha256:" + "0" * 64)]
    sizes = [sum(in_shard(c, i, 2) for c in cells) for i in range(2)]
    assert sum(sizes) == len(cells) and min(sizes) > 0


@given(index=st.integers(min_value=0, max_value=10**6), extra=st.integers(1, 10**6))
def test_parse_round_trip(index: int, extra: int) -> None:
    assert parse_shard(f"{index}/{index + extra}") == (index, index + extra)


@pytest.mark.parametrize(
    "bad", ["", "1", "1/", "/2", "2/2", "3/2", "-1/2", "0/0", "a/b", "1/2/3", "0.5/2", "x" * 10_000]
)
def test_parse_refuses_malformed(bad: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_shard(bad)
    assert "--shard" in exc.value.render()
    assert len(exc.value.render()) < 200  # a long value is cut, not echoed whole
