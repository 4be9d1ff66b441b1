"""A witness that contradicts the claimed fault is INVALID_INJECTION, on the real runtime.

Each actuator here reports `applied: true` but lands only part of the fault (or too much of it);
the real collectors must show exactly that and the evaluator must reject the attempt.
"""

from __future__ import annotations

import pytest

from runner.evaluator.protocol.faultkinds import (
    LOST_RESPONSE,
    NETWORK_PARTITION,
    SANDBOX_RESTART,
)
from runner.runtime.attempt.services import RunServices
from runner.runtime.events import Directive
from runner.runtime.faults.base import FaultContext, Injection
from runner.runtime.faults.network_partition import NetworkPartitionFault
from runner.runtime.faults.sandbox_restart import SandboxRestartFault
from runner.runtime.selftest import INVALID_INJECTION, run_case

pytestmark = pytest.mark.runtime


class EpochOnlyRestart(SandboxRestartFault):
    """Bumps the interposer's epoch but never restarts the container: the pid stays."""

    def inject(self, ctx: FaultContext) -> Injection:
        self.interposer.bump_epoch()
        return Injection(applied=True, directive=Directive.CONTINUE, detail={"fake": True})


class PartitionAlsoControl(NetworkPartitionFault):
    """Blocks the control endpoint too: the probe's control path fails."""

    def inject(self, ctx: FaultContext) -> Injection:
        self.table.add_drop(*self.control)
        return super().inject(ctx)

    def release(self, ctx: FaultContext) -> None:
        super().release(ctx)
        for rule in self.table.rules():  # let the subject reach its tools again
            self.table.remove_rule(rule.rule_id)


def test_sandbox_pid_unchanged(services: RunServices, image: str) -> None:
    # the kind's own build, inherited: the replacement gets the same resources and parameters
    factory = EpochOnlyRestart.build
    row, _ = run_case(services, SANDBOX_RESTART, "real", image, plugin_factory=factory)
    assert row.verdict == INVALID_INJECTION, row
    # The session side did happen (the epoch moved); the identity side did not.
    assert set(row.violated) == {"init_pid_changed", "start_time_changed", "boot_token_changed"}


def test_partition_control_path_also_fails(services: RunServices, image: str) -> None:
    factory = PartitionAlsoControl.build
    row, _ = run_case(services, NETWORK_PARTITION, "real", image, plugin_factory=factory)
    assert row.verdict == INVALID_INJECTION, row
    assert set(row.violated) == {"control_reachable"}


def test_proxy_delivered_response_bytes(services: RunServices, image: str) -> None:
    # Too late to lose the response: the proxy has already delivered it.
    trigger = {"tool": "submit_patch", "ordinal": 1, "phase": "response_sent"}
    row, _ = run_case(services, LOST_RESPONSE, "real", image, trigger=trigger)
    assert row.verdict == INVALID_INJECTION, row
    assert "zero_bytes_delivered" in row.violated
