"""A minimal deterministic subject for self-tests: a fixed list of tool calls and one effect.

Standard library only (it runs as `nobody` under the system Python, outside the venv). It
attaches a session, then runs its steps in order, checkpointing after each one in the state
directory, so a relaunch (AFB_RESTART_INDEX > 0) resumes at the first unfinished step:

    1 write_file  2 read_file  3 exec #1  4 exec #2  5 POST /effects (via the proxy)  6 exec #3

A transport failure (timeout, reset, EOF) is retried after a short pause; a 409 means the
sandbox was restarted: reattach and retry. The effect carries an idempotency key, so retrying a
lost response does not commit twice. Every call outcome goes to AFB_EVENT_LOG.

Call ids are `s<step>-r<restart>-t<try>`, so a test can name the call a trigger must hit.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit

STEPS: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "/tmp/afb-minimal.txt", "content": "hello from the subject\n"}),
    ("read_file", {"path": "/tmp/afb-minimal.txt"}),
    ("exec", {"argv": ["/bin/sh", "-c", "echo one"]}),
    ("exec", {"argv": ["/bin/sh", "-c", "cat /tmp/afb-minimal.txt | wc -c"]}),
    ("effect", {}),
    ("exec", {"argv": ["/bin/sh", "-c", "echo done"]}),
]
MAX_TRIES = 40


class Subject:
    def __init__(self) -> None:
        env = os.environ
        self.tools = _addr(env["AFB_INTERPOSER_URL"])
        self.egress = _addr(env["AFB_EGRESS_URL"])
        self.state = env["AFB_STATE_DIR"]
        self.log_path = env.get("AFB_EVENT_LOG", os.path.join(self.state, "events.jsonl"))
        self.scope = env["AFB_SCOPE"]
        self.task = env.get("AFB_TASK_ID", "")
        self.restart = int(env.get("AFB_RESTART_INDEX", "0"))
        self.timeout = float(env.get("AFB_MIN_TIMEOUT", "4"))
        self.linger = float(env.get("AFB_MIN_LINGER", "0"))  # tests: stay alive mid-run
        self.session: str | None = None
        self.progress = self._load()

    # --- bookkeeping ----------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        try:
            with open(os.path.join(self.state, "progress.json")) as fh:
                return dict(json.load(fh))
        except (OSError, ValueError):
            return {"done": 0}

    def _save(self) -> None:
        tmp = os.path.join(self.state, "progress.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(self.progress, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(self.state, "progress.json"))

    def log(self, event: str, **fields: Any) -> None:
        line = {"t_ns": time.time_ns(), "restart": self.restart, "event": event, **fields}
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")

    # --- HTTP -----------------------------------------------------------------------------------

    def _post(
        self, addr: tuple[str, int], path: str, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(*addr, timeout=self.timeout)
        try:
            data = json.dumps(body).encode()
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request("POST", path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()

    def attach(self) -> None:
        prev = self.session or self.progress.get("session_id")
        body = {"previous_session_id": prev} if prev else {}
        for attempt in range(MAX_TRIES):
            try:
                status, out = self._post(self.tools, "/session", body)
            except (OSError, http.client.HTTPException) as exc:
                self.log("attach_transport_failure", error=type(exc).__name__, attempt=attempt)
                time.sleep(0.2)
                continue
            if status == 200:
                self.session = out["session_id"]
                self.progress["session_id"] = self.session
                self.log("attached", session_id=self.session, epoch=out["epoch"])
                return
            raise SystemExit(f"attach failed: {status} {out}")
        raise SystemExit("attach: interposer unreachable")

    def step(self, n: int, tool: str, args: dict[str, Any]) -> None:
        for attempt in range(MAX_TRIES):
            call_id = f"s{n}-r{self.restart}-t{attempt}"
            try:
                if tool == "effect":
                    status, out = self._effect(call_id)
                else:
                    body = {"session_id": self.session, "call_id": call_id, "tool": tool}
                    status, out = self._post(self.tools, "/call", {**body, "args": args})
            except (OSError, http.client.HTTPException) as exc:
                self.log("transport_failure", step=n, call_id=call_id, error=type(exc).__name__)
                time.sleep(0.2)
                continue
            if status == 409:
                self.log("stale_session", step=n, call_id=call_id)
                self.attach()
                continue
            if status in (200, 201):
                self.log("ok", step=n, call_id=call_id, status=status)
                return
            raise SystemExit(f"step {n} ({tool}): unexpected {status} {out}")
        raise SystemExit(f"step {n} ({tool}): gave up after {MAX_TRIES} tries")

    def _effect(self, call_id: str) -> tuple[int, Any]:
        body = {
            "scope": self.scope,
            "kind": "patch",
            "payload": {"task": self.task, "subject": "minimal"},
            "idempotency_key": f"{self.scope}#effect-1",
        }
        return self._post(self.egress, "/effects", body, {"X-AFB-Call-Id": call_id})

    def run(self) -> int:
        self.log("start", done=self.progress["done"])
        self.attach()
        for n, (tool, args) in enumerate(STEPS, start=1):
            if n <= self.progress["done"]:
                continue
            self.step(n, tool, args)
            self.progress["done"] = n
            self._save()
            if n == 2 and self.linger > 0:
                time.sleep(self.linger)
        self.log("finished")
        return 0


def _addr(url: str) -> tuple[str, int]:
    u = urlsplit(url)
    assert u.hostname is not None and u.port is not None, url
    return u.hostname, u.port


if __name__ == "__main__":
    sys.exit(Subject().run())
