"""Faults on MCP calls, judged by the evaluator: the irreversible submit as an MCP tool.

The MCP submit is carried by the egress proxy (the same events, the same byte counts, the same
ledger), so the built-in lost_response plugin and witness contract apply unchanged; the MCP
server withholds from the agent whatever the proxy withheld from it. A real drop is WITNESSED
(the agent's MCP call really fails, the effect is committed); a no-op actuator that still says
"applied" is INVALID_INJECTION.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import Journal
from runner.evaluator.protocol.faultkinds import LOST_RESPONSE, SIGKILL_MID_TOOL_CALL, FaultKind
from runner.evaluator.protocol.witness import WitnessContract
from runner.runtime.faults.base import FaultPlugin
from runner.runtime.faults.lost_response import LostResponseFault
from runner.runtime.faults.sigkill import SigkillFault
from runner.runtime.host import naming
from runner.runtime.host.procs import ExitStatus, Reaper, Subject, SubjectLauncher
from runner.runtime.interposers.destination import DestinationService
from tests.mcp.helpers import SCOPE, Rig, call, judged_attempt, run
from tests.process_registry import ProcessRegistry
from tests.runtime_interposers.conftest import LocalSandbox, effect, request
from tests.runtime_interposers.test_triggers import Probe

SUBMIT = {"payload": {"task": "t", "patch": "--- a\n+++ b\n"}}
LOST = {"tool": "submit_patch", "ordinal": 1, "phase": "effect_done"}


def submit_then_reconcile(rig: Rig) -> dict[str, Any]:
    """An MCP agent: submit; on a transport failure reconnect and look before resubmitting."""

    async def go() -> dict[str, Any]:
        first = await call(rig.mcp.url, "submit_patch", SUBMIT)
        listed = await call(rig.mcp.url, "list_effects", {})
        return {"first": first, "listed": listed}

    return run(go)


def lost(rig: Rig) -> LostResponseFault:
    return LostResponseFault(rig.proxy, rig.destination.address)


def test_a_lost_mcp_submit_response_is_witnessed(
    journal: Journal,
    destination: DestinationService,
    sandbox: LocalSandbox,
    contracts: dict[FaultKind, WitnessContract],
) -> None:
    j = judged_attempt(
        journal, destination, sandbox, kind=LOST_RESPONSE, trigger=LOST,
        parameters={"endpoint": "destination"}, contract=contracts[LOST_RESPONSE],
        make_plugin=lost, subject=submit_then_reconcile,
    )  # fmt: skip
    assert j.status is Status.COMPLETED, j.reasons  # witnessed, and the task's one effect landed
    assert j.states == ["scheduled", "armed", "injected", "witnessed", "released"]
    first, listed = j.subject["first"], j.subject["listed"]
    assert isinstance(first, str) and first.startswith("transport: "), first  # really lost
    items = listed.structured_content["response"]["items"]
    assert len(items) == 1 and items[0]["payload"] == SUBMIT["payload"]
    obs = j.observations()
    assert obs["proxy_connection"]["downstream_response_bytes"] == 0
    assert obs["proxy_connection"]["upstream_response_bytes"] > 0
    assert obs["destination_ledger"]["effect_id"] == items[0]["effect_id"]
    assert items[0]["call_id"].startswith("mcp-")  # the ledger names the MCP call
    assert obs["agent_side"]["transport_failure"] is True


def test_a_noop_drop_on_an_mcp_submit_is_invalid_injection(
    journal: Journal,
    destination: DestinationService,
    sandbox: LocalSandbox,
    contracts: dict[FaultKind, WitnessContract],
) -> None:
    j = judged_attempt(
        journal, destination, sandbox, kind=LOST_RESPONSE, trigger=LOST,
        parameters={"endpoint": "destination"}, contract=contracts[LOST_RESPONSE],
        make_plugin=lambda rig: lost(rig).noop(), subject=submit_then_reconcile,
    )  # fmt: skip
    assert j.status is Status.INVALID_INJECTION, j.reasons
    assert "rejected" in j.states and "witnessed" not in j.states
    first = j.subject["first"]
    assert not isinstance(first, str) and not first.is_error  # nothing was lost ...
    assert first.structured_content["status"] == 201
    receipts = [r for r in j.records if r.type == "actuator_receipt"]
    assert [r.applied for r in receipts] == [True]  # ... though the actuator says applied


def test_submit_ordinals_count_mcp_and_http_submits_alike(
    journal: Journal,
    destination: DestinationService,
    sandbox: LocalSandbox,
    contracts: dict[FaultKind, WitnessContract],
) -> None:
    # The first submit goes over plain HTTP through the proxy, the second over MCP: a trigger at
    # submit_patch #2 fires on the MCP one.
    probe = Probe()

    def subject(rig: Rig) -> Any:
        status, _ = request(rig.proxy.address, "POST", "/effects", effect(SCOPE, 1),
                            {"X-AFB-Call-Id": "http-1"})  # fmt: skip
        assert status == 201
        return run(lambda: call(rig.mcp.url, "submit_patch", SUBMIT))

    j = judged_attempt(
        journal, destination, sandbox, kind=SIGKILL_MID_TOOL_CALL,
        trigger={"tool": "submit_patch", "ordinal": 2, "phase": "received"},
        parameters={"target": "subject"}, contract=None,  # type: ignore[arg-type]
        make_plugin=lambda rig: probe, subject=subject,
    )  # fmt: skip
    (ev,) = probe.injected
    assert ev.source == "egress_proxy" and ev.ordinal == 2 and ev.call_id.startswith("mcp-")
    (reached,) = [r for r in j.records if r.type == "trigger_reached"]
    assert reached.call_id == ev.call_id  # type: ignore[attr-defined]
    counts = [r for r in j.records if r.type == "tool_calls"]
    assert counts[0].by_tool == {"submit_patch": 2}  # type: ignore[attr-defined]


# --- SIGKILL while an MCP call is held in flight: a real subject process, the real reaper ------


class _Registry(ProcessRegistry):
    """The sigkill plugin's view of the subject processes (the attempt's SubjectRegistry, minus
    netns and privilege drop, which are not what this test is about)."""

    def __init__(self, launcher: SubjectLauncher, state_dir: Path) -> None:
        super().__init__()
        self.launcher, self.state_dir = launcher, state_dir

    def launch(self, url: str, calls: int) -> Subject:
        argv = [sys.executable, str(Path(__file__).with_name("mcp_subject.py")), url, str(calls)]
        return self.add(self.launcher.launch(argv, state_dir=self.state_dir))


@pytest.mark.parametrize("actuator", ["real", "noop"])
def test_sigkill_mid_mcp_call(
    journal: Journal,
    destination: DestinationService,
    sandbox: LocalSandbox,
    contracts: dict[FaultKind, WitnessContract],
    run_dir: Path,
    actuator: str,
) -> None:
    with Reaper() as reaper:
        registry = _Registry(SubjectLauncher(naming.new_run_id(), reaper), run_dir / "subject")

        def plugin(rig: Rig) -> FaultPlugin:
            p = SigkillFault(registry, rig.interposer, rig.proxy)
            return p.noop() if actuator == "noop" else p

        def subject(rig: Rig) -> tuple[ExitStatus, str]:
            s = registry.launch(rig.mcp.url, 3)
            status = s.wait(60)
            return status, (registry.state_dir / "stdout.log").read_text()

        j = judged_attempt(
            journal, destination, sandbox, kind=SIGKILL_MID_TOOL_CALL,
            trigger={"tool": "exec", "ordinal": 2, "phase": "dispatched"},
            parameters={"target": "subject"}, contract=contracts[SIGKILL_MID_TOOL_CALL],
            make_plugin=plugin, subject=subject,
        )  # fmt: skip
    status, log = j.subject
    obs = j.observations()
    if actuator == "real":
        # witnessed (FAILED: this subject commits no effect), then recovered: relaunch asked
        assert j.status is Status.FAILED, j.reasons
        assert j.states == ["scheduled", "armed", "injected", "witnessed", "recovered"]
        assert status.signaled and status.term_signal == 9
        assert len(log.splitlines()) == 1  # killed during its second call
        call = obs["interposer_call"]
        assert call["collector"] == "tool_interposer" and call["call_id"].startswith("mcp-")
        assert call["in_flight"] is True and call["phases"] == ["received", "dispatched"]
        assert registry.relaunch
    else:
        assert j.status is Status.INVALID_INJECTION, j.reasons
        assert status.exited and status.exit_code == 0 and len(log.splitlines()) == 3
        assert not registry.relaunch
