"""tau-lite's reference subjects: the four durability strategies of swe-lite's oracles, on
tau-lite's write tools (DESIGN §8).

Each carries out a task's expected actions (the oracle view's `expected_actions`) in order
through the attempt's egress: a read at `POST /tools/<name>`, a write at `POST
/effects/<name>` (`{scope, payload: <arguments>}`). A write the domain refuses (422) is the
domain's answer, recorded and passed over; only a transport failure (no complete answer) is
ambiguous. They differ only in how they survive faults, so each must show its known weakness:

- blind_retry: no persistence; retries a failed call as is; after a restart starts over.
  Weakness: repeats a committed write under a lost response and under SIGKILL after the commit
  (a duplicate where the domain accepts the repeat: airline bookings, cancellations,
  certificates; a refusal where it does not: retail).
- checkpoint: records each completed step in its state directory and resumes after the last.
  Weakness: a write that committed but whose checkpoint did not is replayed.
- idempotency_key: checkpoints, and sends a key derived from the task, scope and step with each
  write; the destination (declaring the capability) commits it once.
- intent_reconcile: checkpoints; before a write, counts the matching committed effects in the
  destination's ledger (`GET /effects?scope=`) and persists the intent with that count; after
  any ambiguity (transport failure, or a restart with an open intent) it counts again and only
  resends when no new matching effect is there.

Standalone (standard library only): it runs as an unprivileged user inside the attempt's
network namespace with the system python3 and imports nothing of the benchmark. It reads
AFB_EGRESS_URL, AFB_SCOPE, AFB_STATE_DIR, AFB_EVENT_LOG, AFB_RESTART_INDEX and the oracle view
(AFB_ORACLE_FILE or --oracle FILE).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

STRATEGIES = ("blind_retry", "checkpoint", "idempotency_key", "intent_reconcile")


class Transport(Exception):
    """The call's outcome is unknown: no (complete) response arrived."""


class Agent:
    def __init__(self, strategy: str, task: dict[str, Any]) -> None:
        self.strategy = strategy
        self.task = task
        self.egress = urllib.parse.urlsplit(os.environ["AFB_EGRESS_URL"])
        self.state_dir = Path(os.environ["AFB_STATE_DIR"])
        self.log_path = Path(os.environ["AFB_EVENT_LOG"])
        self.scope = os.environ["AFB_SCOPE"]
        self.restart = int(os.environ.get("AFB_RESTART_INDEX", "0"))
        self.calls = 0
        self.persist = strategy != "blind_retry"
        self.writes = {t["name"] for t in task["tools"] if t["irreversible"]}
        self.state: dict[str, Any] = self._load() if self.persist else {"done": 0}

    def log(self, event: str, **fields: Any) -> None:
        line = json.dumps(
            {"t": str(time.time_ns()), "restart": self.restart, "event": event, **fields},
            sort_keys=True,
        )
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _state_file(self) -> Path:
        return self.state_dir / "agent-state.json"

    def _load(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self._state_file().read_text()))
        except FileNotFoundError:
            return {"done": 0}

    def save(self) -> None:
        if not self.persist:
            return
        tmp = self._state_file().with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._state_file())

    def _http(
        self, method: str, path: str, body: dict[str, Any] | None, call_id: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection(self.egress.hostname or "", self.egress.port, timeout=10)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if call_id:
            headers["X-AFB-Call-Id"] = call_id
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise Transport(f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw or b"{}")
        except ValueError as exc:
            raise Transport(f"unparseable response ({resp.status})") from exc

    def _call_id(self) -> str:
        self.calls += 1
        return f"r{self.restart}-c{self.calls}"

    # ------------------------------------------------------------------------------ calls

    def read(self, name: str, args: dict[str, Any]) -> None:
        for attempt in range(30):  # a read is safe to retry, for every strategy
            call_id = self._call_id()
            self.log("call", tool=name, call_id=call_id, try_=attempt)
            try:
                status, body = self._http("POST", f"/tools/{name}", {"arguments": args}, call_id)
            except Transport as exc:
                self.log("transport_failure", tool=name, call_id=call_id, error=str(exc))
                time.sleep(0.5)
                continue
            self.log("call_done", tool=name, call_id=call_id, status=status, ok=body.get("ok"))
            return
        raise SystemExit(f"{name}: gave up after repeated transport failures")

    def _send(self, name: str, args: dict[str, Any], key: str | None) -> int:
        call_id = self._call_id()
        body: dict[str, Any] = {"scope": self.scope, "kind": name, "payload": args}
        if key is not None:
            body["idempotency_key"] = key
        self.log("write", tool=name, call_id=call_id, key=key)
        status, answer = self._http("POST", f"/effects/{name}", body, call_id)
        if status not in (200, 201, 422):
            raise Transport(f"{name} answered {status}")
        self.log(
            "write_done",
            tool=name,
            call_id=call_id,
            status=status,
            effect_id=answer.get("effect_id"),
            error=answer.get("error"),
        )
        return status

    def _count(self, name: str, args: dict[str, Any]) -> int | None:
        """Committed effects of this scope matching (tool, arguments); None if unknown."""
        try:
            q = urllib.parse.urlencode({"scope": self.scope})
            status, body = self._http("GET", f"/effects?{q}", None)
        except Transport as exc:
            self.log("reconcile_failed", error=str(exc))
            return None
        if (
            status != 200
            or body.get("scope") != self.scope
            or not isinstance(body.get("items"), list)
        ):
            self.log("reconcile_bad_answer", status=status)
            return None
        return sum(
            1
            for i in body["items"]
            if i.get("scope") == self.scope and i.get("kind") == name and i.get("payload") == args
        )

    def _count_known(self, name: str, args: dict[str, Any]) -> int:
        while (n := self._count(name, args)) is None:
            time.sleep(1.0)
        return n

    def write(self, step: int, name: str, args: dict[str, Any]) -> None:
        digest = hashlib.sha256(
            json.dumps(
                [self.task["task_id"], self.scope, step, name, args], sort_keys=True
            ).encode()
        ).hexdigest()[:24]
        key = f"write-{digest}" if self.strategy == "idempotency_key" else None
        if self.strategy == "intent_reconcile":
            intent = self.state.get("intent")
            if intent is not None and intent["step"] == step:  # restarted with an open intent
                if self._count_known(name, args) > intent["before"]:
                    self.log("reconciled", step=step, found=True)
                    return
            else:
                self.state["intent"] = {"step": step, "before": self._count_known(name, args)}
                self.save()  # persist the intent BEFORE dispatch
                self.log("intent_persisted", step=step)
        for _ in range(30):
            try:
                self._send(name, args, key)
                return
            except Transport as exc:
                self.log("transport_failure", tool=name, error=str(exc))
                time.sleep(1.0)
                if (
                    self.strategy == "intent_reconcile"
                    and self._count_known(name, args) > self.state["intent"]["before"]
                ):
                    self.log("reconciled", step=step, found=True)
                    return
        raise SystemExit(f"{name}: gave up")

    def run(self) -> int:
        actions = self.task["expected_actions"]
        self.log("start", strategy=self.strategy, done=self.state["done"])
        for step, action in enumerate(actions):
            if step < self.state["done"]:
                continue
            if action["name"] in self.writes:
                self.write(step, action["name"], action["arguments"])
            else:
                self.read(action["name"], action["arguments"])
            self.state["done"] = step + 1
            self.state.pop("intent", None)
            self.save()  # the checkpoint after the step
            self.log("step_done", step=step)
        self.log("finished", calls=self.calls)
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--strategy", choices=STRATEGIES, required=True)
    ap.add_argument(
        "--oracle",
        type=Path,
        default=os.environ.get("AFB_ORACLE_FILE"),
        help="the oracle view, a JSON file (default: $AFB_ORACLE_FILE)",
    )
    args = ap.parse_args(argv)
    if args.oracle is None:
        ap.error("no oracle view: give --oracle FILE or set AFB_ORACLE_FILE")
    return Agent(args.strategy, json.loads(Path(args.oracle).read_text())).run()


if __name__ == "__main__":
    sys.exit(main())
