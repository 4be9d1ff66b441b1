"""The memoized and copied shortcuts of the journal hot path give what their definitions give:
a templated record (journal._with_cell) is the model's own copy with its cell id validated,
a memoized witness verdict (outcomes._judged) is evaluate_witness's, a cell digest is the cell
id's, and the artifacts held as bytes are the list."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.inputs import project_root
from runner.evaluator.evidence import journal as J
from runner.evaluator.evidence.records import AttemptStarted, LifecycleTransition, ToolCallCount
from runner.evaluator.protocol.matrix import cell_id
from runner.evaluator.protocol.witness import evaluate_witness, load_contracts
from runner.evaluator.publish.results import _Artifacts
from runner.evaluator.verdict import outcomes as O
from runner.evaluator.verdict.terminals import cell_digest
from tests.evidence.synth import GOOD, NOOP

CELLS = ["sha256:" + c * 64 for c in "ab"]


def _reference_copy(template: Any, cell: str) -> Any:
    record = template.model_copy()
    record.__pydantic_validator__.validate_assignment(record, "cell_id", cell)
    return record


def _state(record: Any) -> tuple[Any, ...]:
    return (
        type(record),
        list(record.__dict__.items()),
        record.__pydantic_fields_set__,
        record.__pydantic_extra__,
        record.__pydantic_private__,
    )


@pytest.mark.parametrize(
    "template",
    [
        LifecycleTransition(cell_id=CELLS[0], attempt=2, fault_id="f", state="armed"),
        ToolCallCount(cell_id=CELLS[0], attempt=1, calls=3, by_tool={"w": 3}),
    ],
)
def test_a_templated_record_is_the_models_own_copy(template: Any) -> None:
    start = AttemptStarted(cell_id=CELLS[0], attempt=1, slot_id=CELLS[1], subject_id="s",
                           subject_config_hash=CELLS[1], fault_id="f", kind="none")  # fmt: skip
    for cell, slot in [(CELLS[1], CELLS[0]), (CELLS[1], CELLS[1]), (CELLS[0], CELLS[0])]:
        want = _reference_copy(start, cell)
        want.__pydantic_validator__.validate_assignment(want, "slot_id", slot)
        assert _state(J._with_cell(start, cell, slot)) == _state(want)
    with pytest.raises(ValueError):
        J._with_cell(start, CELLS[0], "sha256:" + "g" * 64)
    for cell in [CELLS[1], CELLS[1], CELLS[0], CELLS[1]]:  # validated anew, then reused
        got = J._with_cell(template, cell)
        assert _state(got) == _state(_reference_copy(template, cell))
        assert got.__pydantic_fields_set__ is not template.__pydantic_fields_set__
    for bad in ["sha256:" + "A" * 64, "sha256:" + "a" * 63, CELLS[1] + "\n"]:
        with pytest.raises(ValueError):
            J._with_cell(template, bad)  # an id the validator refuses is refused every time
        with pytest.raises(ValueError):
            J._with_cell(template, bad)


CONTRACTS = load_contracts(project_root() / "witnesses")
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, math.inf, math.nan]),
    st.sampled_from(["", "egress_proxy", "destination_ledger", "closed", "\ud800"]),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=2).map(tuple),
        st.dictionaries(st.sampled_from(["a", "collector", "component", "bytes"]), inner),
    ),
    max_leaves=6,
)


@settings(max_examples=600, deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(sorted(CONTRACTS)),
    noop=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0, 5), _VALUE), max_size=3),
    component=st.sampled_from(["", "bench", "egress_proxy"]),
)
def test_a_memoized_verdict_is_the_witness_checks(
    data: st.DataObject, kind: str, noop: bool, edits: list[Any], component: str
) -> None:
    """Real observations, edited anywhere (any value, any type: 1, 1.0, True, tuples, NaN),
    judged twice (a miss, then a hit) and after other inputs: always the reference verdict."""
    contract = CONTRACTS[kind]
    by_name: dict[str, Any] = {k: dict(v) for k, v in (NOOP if noop else GOOD)[kind].items()}
    for at, value in edits:
        names = sorted(by_name)
        target = by_name[names[at % len(names)]]
        inner = [k for k in target if isinstance(target[k], dict)]
        if at % 2 and inner:
            target = target[inner[at % len(inner)]]
        key = data.draw(st.sampled_from([*sorted(target), "x"]))
        target[key] = value
    params = data.draw(st.sampled_from([{}, {"endpoint": "destination"}, {"x": 1}, {"x": 1.0}]))
    want = _outcome(
        lambda: evaluate_witness(contract, by_name, params, actuator_component=component)
    )
    for _ in range(2):
        assert _outcome(lambda: O._judged(contract, by_name, params, component)) == want


def _outcome(judge: Any) -> Any:
    """The verdict, or the type of the error the judging raised (a list as a collector name,
    unhashable, is one: both raise it)."""
    try:
        return judge()
    except Exception as exc:
        return type(exc)


@given(slot=st.text(max_size=12), subject=st.text(max_size=12))
def test_a_cell_digest_is_the_cell_ids(slot: str, subject: str) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    for s, h in [(slot, subject), (digest, subject), (slot, digest), (digest + slot, digest)]:
        try:
            want: Any = cell_id(s, h)[7:]
        except ValueError:
            want = ValueError
        try:
            got: Any = cell_digest(s, h).hex()
        except ValueError:
            got = ValueError
        assert got == want


@given(names=st.lists(st.text(st.characters(blacklist_characters="\0"), max_size=8), max_size=5))
def test_the_artifacts_held_as_bytes_are_the_list(names: list[str]) -> None:
    held = _Artifacts(names)
    want = [f"journals/{n}" for n in names] + ["protocol.json"]
    assert list(held) == want
    assert list(held) == want  # iterated again: the same
