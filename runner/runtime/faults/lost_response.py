"""lost_response: the proxy forwards the call, receives the response, delivers zero bytes of it.

Actuator: the `drop_response` directive to the egress proxy, at the triggered phase (the
schedule's default is `effect_done`). Collectors, each reading its own source after the proxy
applied the directive and saw the subject's side end:

- `proxy_connection` (egress_proxy): the proxy's byte counts for the triggering exchange;
- `destination_ledger` (destination_ledger): the destination's own ledger, read through a
  shape-checked `GET /effects?scope=S` (status, content type, JSON body, scope echoed, every item
  in scope); a failed check records `committed: false` with `shape_failures`, never a value;
- `agent_side` (egress_proxy): how the subject's connection ended after the proxy half-closed
  it -- a transport failure is an EOF or reset from the subject with zero response bytes.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Self
from urllib.parse import quote

from runner.evaluator.protocol.faultkinds import LOST_RESPONSE, LostResponseParams
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
from runner.runtime.faults.resources import AttemptResources, CallRecorder
from runner.runtime.interposers.egress import ExchangeRecord

AFTER = WitnessStage.AFTER_INJECTION


class LostResponseFault(FaultPlugin[LostResponseParams]):
    kind = LOST_RESPONSE
    actuator = "egress_proxy.drop_response"
    actuator_component = "egress_proxy"
    observations = {
        "proxy_connection": Observed("egress_proxy", AFTER),
        "destination_ledger": Observed("destination_ledger", AFTER),
        "agent_side": Observed("egress_proxy", AFTER),
    }
    witness_after_directive = True  # the counts mean something only once the drop happened

    def __init__(
        self,
        proxy: CallRecorder,
        destination: tuple[str, int],
        *,
        scope_field: str = "scope",
        read_timeout: float = 10.0,
        params: LostResponseParams | None = None,
    ) -> None:
        self.proxy = proxy
        self.destination = destination
        self.scope_field = scope_field
        self.read_timeout = read_timeout
        self.params = params or LostResponseParams()  # endpoint: the destination, the only one

    @classmethod
    def build(cls, resources: AttemptResources, params: LostResponseParams) -> Self:
        """The triggered tool's egress proxy and its effects' ledger (for tool `model`: the model
        proxy's front and backend ledger, scoped by the request's `model`)."""
        r = resources
        return cls(r.egress, r.ledger.address, scope_field=r.ledger.scope_field, params=params)

    def inject(self, ctx: FaultContext) -> Injection:
        ev = ctx.require_event()
        if ev.source != "egress_proxy":
            # Only the proxy can withhold response bytes; anywhere else the drop is not this fault.
            return Injection(applied=False, detail={"error": f"trigger at {ev.source}"})
        return Injection(
            applied=True,
            directive=Directive.DROP_RESPONSE,
            detail={
                "call_id": ev.call_id,
                "connection_id": str(ev.context.get("connection_id", "")),
                "phase": ev.phase.value,
            },
        )

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        ev = ctx.require_event()
        found = self.proxy.find_call(ev.call_id, ev.context.get("connection_id"))
        ex = found[1] if found is not None else None
        return {
            "proxy_connection": self._proxy_counts(found),
            "destination_ledger": self._ledger(ev.call_id, ex),
            "agent_side": self._agent_side(ex),
        }

    # --- collectors -----------------------------------------------------------------------------

    @staticmethod
    def _proxy_counts(found: Any) -> dict[str, Any]:
        if found is None:
            return {"collector": "egress_proxy", "found": False}
        conn, ex = found
        return {
            "collector": "egress_proxy",
            "found": True,
            "connection_id": conn.connection_id,
            "exchange": ex.index,
            "upstream_request_bytes": ex.upstream_request_bytes,
            "upstream_response_bytes": ex.upstream_response_bytes,
            "downstream_response_bytes": ex.downstream_response_bytes,
            "downstream_request_bytes": ex.downstream_request_bytes,
            "upstream_status": ex.status,
            "outcome": ex.outcome,
            "connection_downstream_response_bytes": conn.downstream_response_bytes,
        }

    @staticmethod
    def _agent_side(ex: ExchangeRecord | None) -> dict[str, Any]:
        end = ex.subject_end if ex is not None else None
        zero = ex is not None and ex.downstream_response_bytes == 0
        return {
            "collector": "egress_proxy",
            "subject_end": end,
            "response_bytes_seen_by_subject": ex.downstream_response_bytes if ex else None,
            "transport_failure": zero and end in ("eof", "reset"),
        }

    def _ledger(self, call_id: str, ex: ExchangeRecord | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "collector": "destination_ledger",
            "call_id": call_id,
            "committed": False,
            "effect_id": "",
        }
        scope = self._scope_of(ex)
        if scope is None:
            return {**out, "shape_failures": ["request_scope_unknown"]}
        items, failures = read_effects(self.destination, scope, self.read_timeout)
        out["scope"] = scope
        if failures:
            return {**out, "shape_failures": failures}
        mine = [i for i in items if i.get("call_id") == call_id]
        out["matching_items"] = len(mine)
        out["shape_failures"] = []
        if mine:
            out["committed"] = True
            out["effect_id"] = str(mine[0].get("effect_id", ""))
        return out

    def _scope_of(self, ex: ExchangeRecord | None) -> str | None:
        if ex is None:
            return None
        try:
            scope = json.loads(ex.request_body).get(self.scope_field)
        except (ValueError, AttributeError):
            return None
        return scope if isinstance(scope, str) and scope else None


def read_effects(
    destination: tuple[str, int], scope: str, timeout: float = 10.0
) -> tuple[list[dict[str, Any]], list[str]]:
    """The destination's items in `scope`, shape-checked: (items, []) or ([], reason codes)."""
    conn = http.client.HTTPConnection(*destination, timeout=timeout)
    try:
        conn.request("GET", f"/effects?scope={quote(scope, safe='')}")
        resp = conn.getresponse()
        status, ctype, raw = resp.status, resp.getheader("Content-Type", ""), resp.read()
    except (OSError, http.client.HTTPException) as exc:
        return [], [f"read_failed: {type(exc).__name__}"]
    finally:
        conn.close()
    failures: list[str] = []
    if status != 200:
        failures.append("status_mismatch")
    if ctype.split(";")[0].strip().lower() != "application/json":
        failures.append("content_type_mismatch")
    try:
        body = json.loads(raw)
    except ValueError:
        return [], [*failures, "body_not_parseable"]
    if not isinstance(body, dict):
        return [], [*failures, "body_not_parseable"]
    if body.get("scope") != scope:
        failures.append("scope_not_echoed")
    items = body.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return [], [*failures, "items_missing"]
    if any(i.get("scope") != scope for i in items):
        failures.append("item_out_of_scope")  # a filter the server silently ignored
    return ([], failures) if failures else (items, [])


register(
    FaultKindPlugin(
        LostResponseFault,
        selftest=SelftestCase(
            trigger={"tool": "submit_patch", "ordinal": 1, "phase": "effect_done"},
            parameters={"endpoint": "destination"},
        ),
    )
)
