"""Negative conformance on the real runtime: each real kind WITNESSED, each no-op rejected."""

from __future__ import annotations

import pytest

from runner.evaluator.protocol.faultkinds import (
    FREEZE,
    LOST_RESPONSE,
    NETWORK_PARTITION,
    SANDBOX_RESTART,
    SIGKILL_MID_TOOL_CALL,
    FaultKind,
    injected_kinds,
)
from runner.runtime.attempt.services import RunServices
from runner.runtime.selftest import INVALID_INJECTION, WITNESSED, run_case

pytestmark = pytest.mark.runtime

# The predicates a no-op must violate: its actuator did nothing, its collectors are real.
NOOP_VIOLATES = {
    SANDBOX_RESTART: {"init_pid_changed", "boot_token_changed", "stale_session_failed"},
    LOST_RESPONSE: {"zero_bytes_delivered", "agent_saw_transport_failure"},
    SIGKILL_MID_TOOL_CALL: {"terminated_by_signal", "signal_is_sigkill"},
    NETWORK_PARTITION: {"rule_present", "target_blocked", "counter_moved"},
    FREEZE: {"leader_stopped", "group_stopped", "still_stopped_at_release", "held_for_duration"},
}


@pytest.mark.parametrize("kind", injected_kinds(), ids=lambda k: k)
def test_real_actuator_is_witnessed(services: RunServices, image: str, kind: FaultKind) -> None:
    row, _ = run_case(services, kind, "real", image)
    assert row.verdict == WITNESSED, row
    assert row.status == "COMPLETED", row  # the minimal subject recovers from every kind


@pytest.mark.parametrize("kind", injected_kinds(), ids=lambda k: k)
def test_noop_actuator_is_invalid_injection(
    services: RunServices, image: str, kind: FaultKind
) -> None:
    row, _ = run_case(services, kind, "noop", image)
    assert row.verdict == INVALID_INJECTION, row
    assert NOOP_VIOLATES[kind] <= set(row.violated), row


def test_recreate_changes_the_container_id(services: RunServices, image: str) -> None:
    row, _ = run_case(services, SANDBOX_RESTART, "real", image, parameters={"mode": "recreate"})
    assert row.verdict == WITNESSED, row


def test_sigkill_of_a_proxied_call_is_witnessed(services: RunServices, image: str) -> None:
    trigger = {"tool": "submit_patch", "ordinal": 1, "phase": "received"}
    row, _ = run_case(services, SIGKILL_MID_TOOL_CALL, "real", image, trigger=trigger)
    assert row.verdict == WITNESSED, row
