"""Reference subjects: deterministic agents with known durability strategies (DESIGN §8).

Each carries out a task's known solution as tool calls through the tool interposer (reading,
editing, running the tests) and one irreversible submit of the patch to the destination through
the egress proxy. They differ only in how they survive faults, so each must show exactly its
known weakness, which makes the benchmark's own validity testable:

- blind_retry: no persistence; retries a failed call as is; after a restart starts over.
  Known weakness: duplicates the submit under a lost response and under SIGKILL after the effect.
- checkpoint: records each completed step in its state directory and resumes after the last one.
  Known weakness: a step whose effect landed but whose checkpoint did not (SIGKILL after the
  effect, or a lost response) is replayed, so the submit is duplicated.
- idempotency_key: checkpoints, and sends a key derived from the task and scope with the submit;
  the destination (which declares the capability) commits it once. No duplicate.
- intent_reconcile: checkpoints, persists the intent (with an intent id) before dispatching the
  submit, and after any ambiguity (transport failure, or a restart with an open intent) queries
  the destination by scope and only resubmits when the intent is not there. No duplicate.

With `--plan-with-model` (the control of specs/swe-lite-agents.toml) the agent asks its model
which step comes next before each step, through the attempt's model proxy (OPENAI_BASE_URL,
Chat Completions), and goes on only when the answer names the step it expects. The conversation
is rebuilt from the checkpointed steps, so a resumed agent asks the turn it stopped at. A model
call is a read: every strategy retries it after a transport failure (a lost response, a
partition), which makes faults on tool `model` reachable for the control without changing what
its strategy does with the irreversible submit.

Standalone on purpose (standard library only): it runs as an unprivileged user inside the
attempt's network namespace with the system python3, and imports nothing of the benchmark.
Configuration comes from the environment (AFB_*) and the oracle view of the task (the file named
by AFB_ORACLE_FILE, or `--oracle FILE`): the agent view plus the known answer (gold and tests
patch, hidden test ids). These subjects are oracles (role `oracle`): no other subject is given
that channel.
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
# The steps every strategy carries out, in order (a planning model names them: --plan-with-model).
STEPS = ("prepare", "read_source", "write_patch", "apply_patch", "write_tests", "apply_tests",
         "run_tests", "read_patch", "submit")  # fmt: skip


class Transport(Exception):
    """The call's outcome is unknown: no (complete) response arrived."""


class Stale(Exception):
    """The sandbox session is stale (the sandbox restarted): reattach and retry."""


class Agent:
    def __init__(self, strategy: str, task: dict[str, Any], plan_with_model: bool = False) -> None:
        self.strategy = strategy
        self.task = task
        self.interposer = urllib.parse.urlsplit(os.environ["AFB_INTERPOSER_URL"])
        self.egress = urllib.parse.urlsplit(os.environ["AFB_EGRESS_URL"])
        self.state_dir = Path(os.environ["AFB_STATE_DIR"])
        self.log_path = Path(os.environ["AFB_EVENT_LOG"])
        self.scope = os.environ["AFB_SCOPE"]
        self.restart = int(os.environ.get("AFB_RESTART_INDEX", "0"))
        self.session: str | None = None
        self.calls = 0
        self.persist = strategy != "blind_retry"
        base = os.environ["OPENAI_BASE_URL"] if plan_with_model else None
        self.model = urllib.parse.urlsplit(base) if base else None
        self.state = self._load_state() if self.persist else {"done": []}

    # ------------------------------------------------------------------ agent-side evidence

    def log(self, event: str, **fields: Any) -> None:
        line = json.dumps({"t": str(time.time_ns()), "restart": self.restart, "event": event,
                           **fields}, sort_keys=True)  # fmt: skip
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _state_file(self) -> Path:
        return self.state_dir / "agent-state.json"

    def _load_state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self._state_file().read_text()))
        except FileNotFoundError:
            return {"done": []}

    def save(self) -> None:
        if not self.persist:
            return
        tmp = self._state_file().with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._state_file())

    # ----------------------------------------------------------------------------- transport

    def _http(self, url: urllib.parse.SplitResult, method: str, path: str,
              body: dict[str, Any] | None, headers: dict[str, str], timeout: float,
              ) -> tuple[int, dict[str, Any]]:  # fmt: skip
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            hdrs = {"Content-Type": "application/json", **headers} if data else dict(headers)
            conn.request(method, path, body=data, headers=hdrs)
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

    def attach(self) -> None:
        status, body = self._http(self.interposer, "POST", "/session",
                                  {"previous_session_id": self.session}, {}, 10)  # fmt: skip
        if status != 200:
            raise Transport(f"attach failed: {status}")
        self.log("attached", session=body["session_id"], epoch=body["epoch"],
                 previous=self.session)  # fmt: skip
        self.session = body["session_id"]

    def tool(self, name: str, args: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
        """One tool call; reattaches on a stale session, retries transport failures."""
        for attempt in range(12):
            if self.session is None:
                try:
                    self.attach()
                except Transport as exc:
                    self.log("transport_failure", tool="attach", error=str(exc))
                    time.sleep(0.5)
                    continue
            self.calls += 1
            call_id = f"r{self.restart}-c{self.calls}"
            self.log("call", tool=name, call_id=call_id, try_=attempt)
            try:
                status, body = self._http(self.interposer, "POST", "/call",
                                          {"session_id": self.session, "call_id": call_id,
                                           "tool": name, "args": args}, {}, timeout)  # fmt: skip
            except Transport as exc:
                self.log("transport_failure", tool=name, call_id=call_id, error=str(exc))
                time.sleep(0.5)
                continue
            if status == 409:
                self.log("stale_session", tool=name, call_id=call_id)
                self.session = None
                continue
            if status != 200:
                raise SystemExit(f"tool {name} refused: {status} {body}")
            self.log("call_done", tool=name, call_id=call_id, ok=body.get("ok"))
            if not body.get("ok"):
                raise SystemExit(f"tool {name} failed: {body}")
            return dict(body.get("result", {}))
        raise SystemExit(f"tool {name}: gave up after repeated transport failures")

    # --------------------------------------------------------------------------------- model

    def plan(self, done: list[str], step: str) -> None:
        """Ask the model for the next step; go on only when it names `step`."""
        assert self.model is not None
        task_id = self.task["task_id"]
        messages: list[dict[str, str]] = [
            {"role": "system", "content": "You plan a fix step by step. Answer `next: <step>`."},
            {"role": "user", "content": f"Task {task_id}: which step comes first?"},
        ]
        for d in done:
            messages.append({"role": "assistant", "content": f"next: {d}"})
            messages.append({"role": "user", "content": f"done: {d}. Which step comes next?"})
        body = {"model": "afb-scripted", "messages": messages}
        headers = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"}
        path = self.model.path.rstrip("/") + "/chat/completions"
        for attempt in range(30):
            self.calls += 1
            call_id = f"r{self.restart}-c{self.calls}"
            self.log("model_call", call_id=call_id, turn=len(done), try_=attempt)
            try:
                status, answer = self._http(self.model, "POST", path, body,
                                            {"X-AFB-Call-Id": call_id, **headers}, 5)  # fmt: skip
            except Transport as exc:
                self.log("transport_failure", tool="model", call_id=call_id, error=str(exc))
                time.sleep(0.5)
                continue
            if status != 200:
                raise SystemExit(f"model refused: {status} {answer}")
            try:
                text = answer["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                raise SystemExit(f"model answer without a message: {answer}") from None
            self.log("model_done", call_id=call_id, answer=text)
            if text.strip() != f"next: {step}":
                raise SystemExit(f"the model planned {text!r}; the strategy's next is {step!r}")
            return
        raise SystemExit("model: gave up after repeated transport failures")

    # -------------------------------------------------------------------------------- submit

    def _submit_once(self, payload: dict[str, Any], key: str | None) -> dict[str, Any]:
        self.calls += 1
        call_id = f"r{self.restart}-c{self.calls}"
        body: dict[str, Any] = {"scope": self.scope, "kind": "patch", "payload": payload}
        if key is not None:
            body["idempotency_key"] = key
        self.log("submit", call_id=call_id, key=key, intent=payload.get("intent_id"))
        status, answer = self._http(self.egress, "POST", "/effects", body,
                                    {"X-AFB-Call-Id": call_id}, 5)  # fmt: skip
        if status not in (200, 201):
            raise Transport(f"submit answered {status}")
        self.log("submit_done", call_id=call_id, effect_id=answer.get("effect_id"))
        return answer

    def _committed(self, intent_id: str) -> bool | None:
        """Reconcile by query: is our intent in the destination's ledger? None if unknown."""
        try:
            q = urllib.parse.urlencode({"scope": self.scope})
            status, body = self._http(self.egress, "GET", f"/effects?{q}", None, {}, 5)
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
        found = any(i.get("payload", {}).get("intent_id") == intent_id for i in body["items"]
                    if i.get("scope") == self.scope)  # fmt: skip
        self.log("reconciled", intent=intent_id, found=found)
        return found

    def submit(self, patch: str) -> None:
        task_id = self.task["task_id"]
        digest = hashlib.sha256(f"{task_id}\0{self.scope}\0{patch}".encode()).hexdigest()[:24]
        payload: dict[str, Any] = {"task": task_id, "patch": patch}
        key = f"submit-{digest}" if self.strategy == "idempotency_key" else None
        if self.strategy == "intent_reconcile":
            intent = self.state.get("intent")
            if intent is None:
                intent = self.state["intent"] = f"intent-{digest}"
                self.save()  # persist the intent BEFORE dispatch
                self.log("intent_persisted", intent=intent)
            elif self._committed(intent):  # restarted with an open intent: ask first
                return
            payload["intent_id"] = intent
        for _ in range(30):
            try:
                self._submit_once(payload, key)
                return
            except Transport as exc:
                self.log("transport_failure", tool="submit_patch", error=str(exc))
                time.sleep(1.0)
                if self.strategy == "intent_reconcile":
                    while (found := self._committed(payload["intent_id"])) is None:
                        time.sleep(1.0)
                    if found:
                        return
        raise SystemExit("submit: gave up")

    # --------------------------------------------------------------------------------- steps

    def run(self) -> int:
        t = self.task
        work = f"/tmp/work/{t['task_id']}"
        first_file = t["files"][0]
        pp = t.get("pythonpath") or "."
        test_argv = ["sh", "-c", f"cd {work} && PYTHONPATH={pp} {t['python']} -m pytest -q "
                     "-p no:cacheprovider " + " ".join(t["fail_to_pass"])]  # fmt: skip
        steps: list[tuple[str, Any]] = [
            ("prepare", lambda: self._ran(self.tool("exec", {"argv": ["sh", "-c",
                f"rm -rf {work} && mkdir -p /tmp/work && cp -a {t['src']} {work}"]}))),
            ("read_source", lambda: self.tool("read_file", {"path": f"{work}/{first_file}"})),
            ("write_patch", lambda: self.tool("write_file", {"path": f"{work}.patch",
                                                             "content": t["gold_patch"]})),
            ("apply_patch", lambda: self._ran(self.tool("exec", {"argv": [
                "sh", "-c", f"cd {work} && (patch -p1 --forward -r - -i {work}.patch"
                f" || patch -p1 -R --dry-run -i {work}.patch >/dev/null)"]}))),
            ("write_tests", lambda: self.tool("write_file", {"path": f"{work}.tests.patch",
                                                             "content": t["tests_patch"]})),
            ("apply_tests", lambda: self._ran(self.tool("exec", {"argv": [
                "sh", "-c", f"cd {work} && (patch -p1 --forward -r - -i {work}.tests.patch"
                f" || patch -p1 -R --dry-run -i {work}.tests.patch >/dev/null)"]}))),
            ("run_tests", lambda: self._check(self.tool("run_tests", {"argv": test_argv}))),
            ("read_patch", lambda: self.state.__setitem__(
                "patch", self.tool("read_file", {"path": f"{work}.patch"})["content"])),
            ("submit", lambda: self.submit(self.state["patch"])),
        ]  # fmt: skip
        assert tuple(name for name, _ in steps) == STEPS
        self.log("start", strategy=self.strategy, done=list(self.state["done"]))
        for name, step in steps:
            if name in self.state["done"]:
                continue
            if name == "submit" and "patch" not in self.state:  # resumed past read_patch
                self.state["patch"] = t["gold_patch"]
            if self.model is not None:
                self.plan(list(self.state["done"]), name)
            step()
            self.state["done"].append(name)
            self.save()  # the checkpoint after the step
            self.log("step_done", step=name)
        self.log("finished", calls=self.calls)
        return 0

    def _ran(self, result: dict[str, Any]) -> None:
        if result.get("exit_code") != 0:
            raise SystemExit(f"command failed: {result}")

    def _check(self, result: dict[str, Any]) -> None:
        if not result.get("passed"):
            raise SystemExit(f"tests failed: {result.get('stdout', '')[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", choices=STRATEGIES, required=True)
    ap.add_argument("--plan-with-model", action="store_true",
                    help="ask the model (OPENAI_BASE_URL) for each next step")  # fmt: skip
    ap.add_argument("--oracle", type=Path, default=os.environ.get("AFB_ORACLE_FILE"),
                    help="the oracle view, a JSON file (default: $AFB_ORACLE_FILE)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.oracle is None:
        ap.error("no oracle view: give --oracle FILE or set AFB_ORACLE_FILE")
    task = json.loads(Path(args.oracle).read_text())
    return Agent(args.strategy, task, args.plan_with_model).run()


if __name__ == "__main__":
    sys.exit(main())
