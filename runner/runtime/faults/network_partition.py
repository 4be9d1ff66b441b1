"""network_partition: drop the subject's traffic to the selected endpoint, in its own netns.

Actuator: a drop rule (with a counter) in the attempt's nft table, which lives in the subject's
namespace on the `output` hook, for the egress proxy's address:port (the selected endpoint).
It is applied while the triggering call is held; if that call is at the partitioned endpoint it
is then closed without a response (`close_without_response`): a call in flight to an endpoint
that went away never gets its answer.

Collectors (both independent of the actuator's own account):

- `nft_reader`: the kernel's table read back, every drop rule for the target address:port,
  with the summed packet counter before and after the probe;
- `netns_prober`: TCP connects from a short-lived process started inside the namespace
  (`ip netns exec`), 1 s timeout, to the target (must fail) and the control endpoint (the tool
  interposer, must succeed); after release, the same probe to the target (must succeed).

Release: once the rule has dropped `release_after_blocked_attempts` packets from the subject
beyond the probe's (bounded wait), delete the rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from runner.evaluator.protocol.faultkinds import NETWORK_PARTITION
from runner.runtime.faults.base import (
    Directive,
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    WitnessStage,
)
from runner.runtime.faults.registry import FaultKindPlugin, SelftestCase, register
from runner.runtime.host.nft import NftError, PartitionTable

AFTER = WitnessStage.AFTER_INJECTION
AFTER_RELEASE = WitnessStage.AFTER_RELEASE
PROBE_TIMEOUT = 1.0

_PROBE = """
import json, socket, sys
timeout = float(sys.argv[1])
out = []
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((host, int(port)))
        out.append({"target": target, "reachable": True, "error": ""})
    except OSError as e:
        out.append({"target": target, "reachable": False, "error": type(e).__name__})
    finally:
        s.close()
print(json.dumps(out))
"""


def probe(
    netns: str, targets: list[tuple[str, int]], timeout: float = PROBE_TIMEOUT
) -> list[dict[str, Any]]:
    """TCP connects from inside `netns`; one result per target, failure when unsure."""
    names = [f"{h}:{p}" for h, p in targets]
    argv = ["ip", "netns", "exec", netns, sys.executable, "-I", "-c", _PROBE, str(timeout)]
    got: Any = None
    try:
        r = subprocess.run(
            [*argv, *names], capture_output=True, text=True, timeout=timeout * len(names) + 15
        )
        err = (r.stderr or "").strip()[-200:]
        if r.returncode == 0:
            got = json.loads(r.stdout)
    except (subprocess.TimeoutExpired, ValueError, OSError) as exc:
        err = type(exc).__name__
    if not isinstance(got, list) or len(got) != len(names):
        return [{"target": n, "reachable": False, "error": f"probe_failed: {err}"} for n in names]
    return got


class NetworkPartitionFault(FaultPlugin):
    kind = NETWORK_PARTITION
    actuator = "nft.drop_rule(netns output)"
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
        table: PartitionTable,
        netns: str,
        target: tuple[str, int],
        control: tuple[str, int],
        *,
        target_source: str = "egress_proxy",
        release_wait: float = 30.0,
    ) -> None:
        self.table = table
        self.netns = netns
        self.target = target
        self.control = control
        self.target_source = target_source
        self.release_wait = release_wait
        self._rule_id: str | None = None
        self._packets_after_probe = 0
        self.release_detail: dict[str, Any] = {}

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
            during = self._probe(with_control=True)
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
        return {"probe_after_release": self._probe(with_control=True)}

    def release(self, ctx: FaultContext) -> None:
        if self._rule_id is None:
            return
        want = int(ctx.parameters.get("release_after_blocked_attempts", 1))
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

    def _probe(self, *, with_control: bool) -> dict[str, Any]:
        targets = [self.target, self.control] if with_control else [self.target]
        res = probe(self.netns, targets)
        out: dict[str, Any] = {
            "collector": "netns_prober",
            "netns": self.netns,
            "timeout_s": PROBE_TIMEOUT,
            "target": res[0]["target"],
            "target_reachable": res[0]["reachable"],
            "target_error": res[0]["error"],
        }
        if with_control:
            out |= {
                "control": res[1]["target"],
                "control_reachable": res[1]["reachable"],
                "control_error": res[1]["error"],
            }
        return out


register(
    FaultKindPlugin(
        kind=NETWORK_PARTITION,
        build=lambda r: NetworkPartitionFault(
            r.table, r.net.netns, r.proxy.address, r.interposer.address
        ),
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
