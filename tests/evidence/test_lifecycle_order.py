"""The fault lifecycle, checked in order (issue 13): scheduled -> armed -> injected -> witnessed
-> recovered | released, or `rejected` in place of `witnessed` (the runtime's own witness check
failed: never recovered). An unreached trigger is scheduled -> armed, nothing after.

One row per violation with its literal reason codes; a hypothesis property that the order
records are handed to the evaluator in never changes a decision (order is by journal seq).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.loading import Positioned
from runner.evaluator.evidence.records import (
    ActuatorReceipt,
    AttemptEnded,
    GraderResult,
    LifecycleTransition,
    WitnessObservation,
)
from runner.evaluator.protocol.faultkinds import LOST_RESPONSE
from runner.evaluator.protocol.witness import evaluate_witness
from runner.evaluator.verdict.outcomes import attempt_status, group_attempts
from tests.evidence.synth import ACTUATOR_COMPONENT, GOOD, NOOP
from tests.evidence.test_attempt_status import (
    CELL,
    CONTRACTS,
    FAULT,
    KILL,
    NOOP_KILL,
    SCORER,
    Records,
    _ended,
    _state,
    observed,
    plus,
    pre_trigger,
    without,
    without_state,
    witnessed,
)

INV = Status.INVALID_INJECTION


def status(recs: Records) -> tuple[Status, list[str]]:
    seqs: dict[str, int] = {}
    positioned: list[Positioned] = []
    for journal, record in recs:
        seqs[journal] = seqs.get(journal, 0) + 1
        positioned.append((journal, seqs[journal], record))
    (attempt,) = group_attempts(positioned)[CELL].values()
    return attempt_status(attempt, KILL, {}, CONTRACTS[KILL], SCORER)


def moved(recs: Records, state: str, before: str) -> Records:
    """`state` written just before `before` in the same journal."""
    rest = without_state(recs, state)
    at = next(i for i, (_, r) in enumerate(rest) if getattr(r, "state", None) == before)
    return [*rest[:at], ("j", _state(state)), *rest[at:]]


def rejected(recover: bool = False) -> Records:
    """What the runtime writes when its witness check fails: rejected, never recovered, no
    grade, the attempt ended `injection_rejected`."""
    recs = without_state(without(witnessed(), GraderResult, AttemptEnded), "recovered")
    recs = without(without_state(recs, "witnessed"), WitnessObservation)
    recs = observed(plus(recs, _state("rejected")), NOOP[KILL])
    if recover:
        recs = plus(recs, _state("recovered"))
    return plus(recs, _ended(True, outcome="injection_rejected"))


@dataclass(frozen=True)
class Row:
    id: str
    records: Records
    status: Status
    reasons: list[str]


ROWS = [
    Row("full lifecycle", witnessed(), Status.COMPLETED, []),
    Row("missing arm", without_state(witnessed(), "armed"), INV, ["missing_lifecycle:armed"]),
    Row("missing schedule", without_state(witnessed(), "scheduled"),
        INV, ["missing_lifecycle:scheduled"]),
    Row("arm before schedule", moved(witnessed(), "armed", "scheduled"),
        INV, ["arm_before_schedule"]),
    # Moving a state past an observation also takes that observation out of its phase window.
    Row("injection before arm", moved(witnessed(), "injected", "armed"),
        INV, ["injection_before_arm", "observation_out_of_order:target_process"]),
    Row("witness before injection", moved(witnessed(), "witnessed", "injected"),
        INV, ["observation_out_of_order:interposer_call", "observation_out_of_order:reaper_exit",
              "witness_before_injection"]),
    Row("recovery before witness", moved(witnessed(), "recovered", "witnessed"),
        INV, ["recovery_before_witness"]),
    Row("witnessed, never settled", without_state(witnessed(), "recovered"),
        INV, ["missing_lifecycle:settled"]),
    Row("a state written twice", plus(witnessed(), _state("injected")),
        INV, ["lifecycle_repeated:injected"]),
    Row("rejected by the runtime", rejected(), INV, [*NOOP_KILL, "witness_rejected"]),
    Row("rejected, then recovered", rejected(recover=True),
        INV, ["recovery_after_rejection", *NOOP_KILL, "witness_rejected"]),
    Row("rejected and witnessed", plus(rejected(), _state("witnessed")),
        INV, [*NOOP_KILL, "witness_rejected", "witnessed_and_rejected"]),
    Row("rejection before injection", moved(rejected(), "rejected", "injected"),
        INV, sorted([*NOOP_KILL, "observation_out_of_order:interposer_call",
                     "observation_out_of_order:reaper_exit", "witness_before_injection",
                     "witness_rejected"])),
    # an unreached trigger: scheduled + armed only
    Row("unreached: scheduled and armed", pre_trigger(False),
        Status.SUBJECT_PRE_TRIGGER_FAILURE, ["failed_before_trigger"]),
    Row("unreached: never armed", without_state(pre_trigger(False), "armed"),
        INV, ["missing_lifecycle:armed"]),
    Row("unreached: nothing journaled", without(pre_trigger(False), LifecycleTransition),
        INV, ["missing_lifecycle:armed", "missing_lifecycle:scheduled"]),
    Row("unreached: armed before scheduled", moved(pre_trigger(False), "armed", "scheduled"),
        INV, ["arm_before_schedule"]),
    Row("unreached, yet injected", plus(pre_trigger(True), _state("injected")),
        INV, ["lifecycle_without_trigger:injected"]),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_lifecycle_row(row: Row) -> None:
    assert status(row.records) == (row.status, row.reasons)


# --------------------------------------------------------------- permutation never decides

VARIANTS = [r.records for r in ROWS]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(VARIANTS))), st.randoms(use_true_random=False))
def test_permuting_records_never_changes_a_decision(which: int, rnd) -> None:  # type: ignore[no-untyped-def]
    recs = VARIANTS[which]
    seqs: dict[str, int] = {}
    positioned: list[Positioned] = []
    for journal, record in recs:
        seqs[journal] = seqs.get(journal, 0) + 1
        positioned.append((journal, seqs[journal], record))
    shuffled = list(positioned)
    rnd.shuffle(shuffled)
    want = attempt_status(group_attempts(positioned)[CELL][1], KILL, {}, CONTRACTS[KILL], SCORER)
    got = attempt_status(group_attempts(shuffled)[CELL][1], KILL, {}, CONTRACTS[KILL], SCORER)
    assert got == want


# ------------------------------------------------- collector identity and independence


def test_a_proxied_call_record_is_accepted_under_the_proxy_s_own_name() -> None:
    contract = CONTRACTS[KILL]
    call = {**GOOD[KILL]["interposer_call"], "collector": "egress_proxy",
            "component": "egress_proxy"}  # fmt: skip
    obs = {**GOOD[KILL], "interposer_call": call}
    comp = ACTUATOR_COMPONENT[KILL]
    assert evaluate_witness(contract, obs, {}, actuator_component=comp).satisfied
    # ...and any other label is still wrong
    bad = {**obs, "interposer_call": {**call, "collector": "injector"}}
    got = evaluate_witness(contract, bad, {}, actuator_component=comp).violations
    assert got == ["wrong_collector:interposer_call"]


def test_a_collector_reading_the_actuator_s_component_is_not_independent() -> None:
    contract = CONTRACTS[LOST_RESPONSE]
    obs = GOOD[LOST_RESPONSE]
    same = {**obs, "destination_ledger": {**obs["destination_ledger"], "component": "egress_proxy"}}
    got = evaluate_witness(contract, same, {}, actuator_component="egress_proxy").violations
    assert got == ["collector_not_independent:destination_ledger"]
    unlabelled = {**obs, "destination_ledger": {
        k: v for k, v in obs["destination_ledger"].items() if k != "component"}}  # fmt: skip
    got = evaluate_witness(contract, unlabelled, {}, actuator_component="egress_proxy").violations
    assert got == ["collector_not_independent:destination_ledger"]
    # the evaluator's verdict carries it behind `witness:`
    recs = plus(
        without(witnessed(), ActuatorReceipt),
        ActuatorReceipt(**FAULT, kind=KILL, actuator="t", component="reaper", applied=True),
    )
    assert status(recs) == (INV, ["witness:collector_not_independent:reaper_exit"])


def test_until_after_injection_leaves_after_release_observations_for_later() -> None:
    from runner.evaluator.protocol.faultkinds import SANDBOX_RESTART

    contract = CONTRACTS[SANDBOX_RESTART]
    obs = {k: v for k, v in GOOD[SANDBOX_RESTART].items() if k != "interposer_session"}
    early = evaluate_witness(contract, obs, {"mode": "restart"}, until="after_injection")
    assert early.satisfied, early.violations
    full = evaluate_witness(contract, obs, {"mode": "restart"})
    assert "missing_observation:interposer_session" in full.violations


def test_v1_contracts_and_receipts_keep_their_bytes() -> None:
    # Fields added in v2 are left out at their defaults: old run protocols and journals stay
    # canonical, so they can be regraded.
    body = CONTRACTS[LOST_RESPONSE].model_dump(mode="json", by_alias=True)
    proxy = next(o for o in body["observations"] if o["name"] == "proxy_connection")
    assert set(proxy) == {"name", "collector", "phase", "description"}
    r = ActuatorReceipt(**FAULT, kind=KILL, actuator="t", applied=True)
    assert "component" not in r.model_dump(mode="json")


@pytest.mark.parametrize(
    ("name", "where", "after"),
    [
        # a before_injection observation written after the injection
        ("target_process", "after", "injected"),
        # an after_injection observation written after the verdict: recovery could have run first
        ("reaper_exit", "after", "witnessed"),
        # ... or before the injection it is meant to witness
        ("interposer_call", "before", "injected"),
    ],
)
def test_an_observation_outside_its_phase_is_out_of_order(
    name: str, where: str, after: str
) -> None:
    recs = witnessed()
    obs = next((j, r) for j, r in recs if getattr(r, "name", None) == name)
    rest = [x for x in recs if x is not obs]
    at = next(i for i, (_, r) in enumerate(rest) if getattr(r, "state", None) == after)
    at = at + 1 if where == "after" else at
    got = status([*rest[:at], obs, *rest[at:]])
    assert got[0] is Status.INVALID_INJECTION
    assert f"observation_out_of_order:{name}" in got[1], got
