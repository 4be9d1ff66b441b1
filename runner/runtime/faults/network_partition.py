"""network_partition: drop the subject's traffic to the selected endpoint, in its own netns.

Actuator: a drop rule (with a counter) in the attempt's nft table, which lives in the subject's
namespace on the `output` hook, for the egress proxy's address:port (the selected endpoint).
It is applied while the triggering call is held; if that call is at the partitioned endpoint it
is then closed without a response (`close_without_response`): a call in flight to an endpoint
that went away never gets its answer.

Collectors (both independent of the actuator, which writes over netlink via pyroute2):

- `nft_reader`: the kernel's table read back through the `nft -j` CLI, every drop rule for the
  target address:port, with the summed packet counter read just before the probe and again
  once the probe's SYN has left (the output hook runs inside connect(), so a dropped SYN has
  already moved the counter when connect() returns);
- `netns_prober`: TCP connects from the prober process that already runs inside the namespace
  (`host.prober`, started when the plugin is built, before the subject starts): to the target
  (must not connect within `BLOCK_WAIT_S`) and the control endpoint (the tool interposer, must
  connect within `CONNECT_TIMEOUT_S`); after release, to both again (both must connect).

Release: once the rule has dropped `release_after_blocked_attempts` packets from the subject
beyond the probe's (bounded wait), delete the rule.
"""

from __future__ import annotations

import time
from typing import Any, Self

from runner.evaluator.protocol.faultkinds import NETWORK_PARTITION, PartitionParams
from runner.runtime.events import Directive
from runner.runtime.faults.base import (
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    WitnessStage,
)
from runner.runtime.faults.registry import FaultKindPlugin, SelftestCase, register
from runner.runtime.faults.resources import AttemptResources, RuleTable
from runner.runtime.host.nft import NftError
from runner.runtime.host.prober import NetnsProber, Target

AFTER = WitnessStage.AFTER_INJECTION
AFTER_RELEASE = WitnessStage.AFTER_RELEASE
# A handshake with the host end of our veth takes well under a millisecond (the kernel answers
# the SYN); the dropped-SYN counter, not this wait, is the evidence that the path is cut.
BLOCK_WAIT_S = 0.025
CONNECT_TIMEOUT_S = 1.0


class NetworkPartitionFault(FaultPlugin[PartitionParams]):
    kind = NETWORK_PARTITION
    actuator = "nft.drop_rule(netns output)"
    actuator_component = "nftables"
    observations = {
        "rule_state": Observed("nft_reader", AFTER),
        "probe_during": Observed("netns_prober", AFTER),
        "probe_after_release": Observed("netns_prober", AFTER_RELEASE),
    }
    # Witness and release only once the held call was closed: release waits for the subject's
    # next (blocked) connection attempt, which cannot happen while its call is still held.
    witness_after_directive = True

    def __init__(
        self,
        table: RuleTable,
        prober: NetnsProber,
        target: tuple[str, int],
        control: tuple[str, int],
        *,
        target_source: str = "egress_proxy",
        release_wait: float = 30.0,
        params: PartitionParams | None = None,
    ) -> None:
        self.table = table
        self.prober = prober
        self.netns = prober.netns
        self.target = target
        self.control = control
        self.target_source = target_source
        self.release_wait = release_wait
        self.params = params or PartitionParams()
        self._rule_id: str | None = None
        self._packets_after_probe = 0
        self.release_detail: dict[str, Any] = {}

    @classmethod
    def build(cls, resources: AttemptResources, params: PartitionParams) -> Self:
        """Cut what the subject connects to for the triggered tool's effects (the egress proxy;
        the MCP endpoint or the model proxy's front when those carry them); the tool interposer
        is the control. The prober starts now, before the subject."""
        r = resources
        target, control = r.effect_endpoint.address, r.interposer.address
        return cls(r.table, r.netns.prober(), target, control, params=params)

    def inject(self, ctx: FaultContext) -> Injection:
        ev = ctx.require_event()
        rule = self.table.add_drop(self.target[0], self.target[1])  # read back by add_drop
        self._rule_id = rule.rule_id
        held_at_target = ev.source == self.target_source
        return Injection(
            applied=True,
            directive=Directive.CLOSE_WITHOUT_RESPONSE if held_at_target else Directive.CONTINUE,
            detail={
                "rule_id": rule.rule_id,
                "handle": rule.handle,
                "target": f"{self.target[0]}:{self.target[1]}",
                "table": self.table.name,
                "netns": self.netns,
            },
        )

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        if stage is AFTER:
            before = self._read_rules()
            during, after = self._probe(BLOCK_WAIT_S, between=self._read_rules)
            if after is None:  # the prober failed before its SYN left: still read the table
                after = self._read_rules()
            self._packets_after_probe = after["packets"]
            rule_state = {
                "collector": "nft_reader",
                "table": self.table.name,
                "netns": self.netns,
                "target": f"{self.target[0]}:{self.target[1]}",
                "rule_present": after["present"],
                "rules": after["rules"],
                "counter_packets_before": before["packets"],
                "counter_packets_after": after["packets"],
                "counter_bytes_after": after["bytes"],
            }
            if "error" in after:
                rule_state["error"] = after["error"]
            return {"rule_state": rule_state, "probe_during": during}
        return {"probe_after_release": self._probe(CONNECT_TIMEOUT_S)[0]}

    def release(self, ctx: FaultContext) -> None:
        if self._rule_id is None:
            return
        want = self.params.release_after_blocked_attempts
        deadline = time.monotonic() + self.release_wait
        blocked = 0
        while time.monotonic() < deadline:
            rule = self.table.get_rule(self._rule_id)
            blocked = (rule.packets if rule else 0) - self._packets_after_probe
            if rule is None or blocked >= want:
                break
            time.sleep(0.02)
        self.release_detail = {"blocked_packets": blocked, "wanted": want}
        self.table.remove_rule(self._rule_id)
        self._rule_id = None

    # --- collectors -----------------------------------------------------------------------------

    def _read_rules(self) -> dict[str, Any]:
        try:
            rules = [
                r
                for r in self.table.rules()
                if (r.daddr, r.dport, r.protocol) == (self.target[0], self.target[1], "tcp")
            ]
        except NftError as exc:
            return {"present": False, "rules": [], "packets": 0, "bytes": 0, "error": str(exc)}
        return {
            "present": bool(rules),
            "rules": [r.model_dump() for r in rules],
            "packets": sum(r.packets for r in rules),
            "bytes": sum(r.bytes for r in rules),
        }

    def _probe(self, target_wait: float, between: Any = None) -> tuple[dict[str, Any], Any]:
        targets = [
            Target(self.target[0], self.target[1], target_wait),
            Target(self.control[0], self.control[1], CONNECT_TIMEOUT_S),
        ]
        res, mid = self.prober.probe(targets, between=between)
        out: dict[str, Any] = {
            "collector": "netns_prober",
            "netns": self.netns,
            "prober_pid": self.prober.pid,
            "target": res[0]["target"],
            "target_wait_s": target_wait,
            "target_reachable": res[0]["reachable"],
            "target_error": res[0]["error"],
            "target_elapsed_ms": res[0].get("elapsed_ms"),
            "control": res[1]["target"],
            "control_timeout_s": CONNECT_TIMEOUT_S,
            "control_reachable": res[1]["reachable"],
            "control_error": res[1]["error"],
        }
        return out, mid


register(
    FaultKindPlugin(
        NetworkPartitionFault,
        selftest=SelftestCase(
            trigger={"tool": "submit_patch", "ordinal": 1, "phase": "received"},
            parameters={
                "endpoint": "destination",
                "control": "interposer",
                "release_after_blocked_attempts": 1,
            },
        ),
    )
)
