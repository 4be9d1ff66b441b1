"""mini-swe-agent environment class: bash actions run in the benchmark's sandbox, submit is a tool.

Every action (`{"command": "..."}`) becomes one `exec` tool call through the tool interposer
(`AFB_INTERPOSER_URL`: `POST /session`, `POST /call`), run as `bash -c` in the attempt's sandbox;
its output and exit code come back as mini-swe-agent's observation. A stale session (the sandbox
restarted) re-attaches and says so in the observation, as a reconnecting remote environment would.

mini-swe-agent ends a task with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` followed by the
submission (the swebench config prints the diff after it). This class maps that to the benchmark's
irreversible tool: the submission is POSTed once to the destination (`AFB_EGRESS_URL`
`/effects`, tool `submit_patch`) and only a confirmed commit ends the run (`Submitted`). A submit
whose answer does not arrive is reported to the agent as a failed command, exactly like any
other failed action: what the agent (its model) then does is what the benchmark measures. There
is no idempotency key and no state across restarts: mini-swe-agent has neither.

The bash command `afb-submission-status` (alone on its line) is the benchmark's read-only status
tool, `submission_status`, called through the tool interposer like any tool: its observation is
the tool's JSON answer (`{scope, committed, effects, effect_ids}`), so a model can ask whether a
submission whose answer was lost was committed before it submits again.

Standard library only (plus mini-swe-agent itself), so it imports nothing of the benchmark.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import time
import urllib.parse
from typing import Any

from minisweagent.exceptions import Submitted
from pydantic import BaseModel

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
STATUS_COMMAND = "afb-submission-status"  # -> tool submission_status (read-only)
STATUS_TOOL = "submission_status"


class AfbSandboxEnvironmentConfig(BaseModel):
    cwd: str = "/"
    timeout: int = 120
    env: dict[str, str] = {}


class _Transport(Exception):
    pass


class AfbSandboxEnvironment:
    def __init__(self, *, config_class: type = AfbSandboxEnvironmentConfig, **kwargs: Any) -> None:
        self.config = config_class(**kwargs)
        self.interposer = urllib.parse.urlsplit(os.environ["AFB_INTERPOSER_URL"])
        self.egress = urllib.parse.urlsplit(os.environ["AFB_EGRESS_URL"])
        self.scope = os.environ["AFB_SCOPE"]
        self.task_id = os.environ["AFB_TASK_ID"]
        self.restart = os.environ.get("AFB_RESTART_INDEX", "0")
        self.log_path = os.environ.get("AFB_EVENT_LOG")
        self.session: str | None = None
        self.calls = 0

    # ------------------------------------------------------------------------------ plumbing

    def _log(self, event: str, **fields: Any) -> None:
        if not self.log_path:
            return
        line = json.dumps({"t": str(time.time_ns()), "restart": int(self.restart),
                           "event": event, **fields}, sort_keys=True)  # fmt: skip
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def _http(self, url: urllib.parse.SplitResult, method: str, path: str, body: Any,
              headers: dict[str, str], timeout: float) -> tuple[int, Any]:  # fmt: skip
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            hdrs = {"Content-Type": "application/json", **headers} if data else dict(headers)
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise _Transport(f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw or b"{}")
        except ValueError as exc:
            raise _Transport(f"unparseable answer ({resp.status})") from exc

    def _attach(self) -> None:
        status, body = self._http(self.interposer, "POST", "/session",
                                  {"previous_session_id": self.session}, {}, 30)  # fmt: skip
        if status != 200:
            raise _Transport(f"attach answered {status}")
        self._log("attached", session=body["session_id"], previous=self.session)
        self.session = body["session_id"]

    def _status(self, timeout: int) -> dict[str, Any]:
        """`afb-submission-status`: the read-only status tool, its JSON answer as the output."""
        return self._call(STATUS_TOOL, {}, timeout)

    def _exec(self, command: str, cwd: str, timeout: int) -> dict[str, Any]:
        script = f"cd {cwd} && {command}" if cwd else command
        exports = "".join(f"export {k}={json.dumps(v)}; " for k, v in self.config.env.items())
        # one stream, in order, as mini-swe-agent's own environments give it
        argv = ["bash", "-c", f"exec 2>&1; {exports}{script}"]
        return self._call("exec", {"argv": argv, "timeout": timeout}, timeout)

    def _call(self, tool: str, args: dict[str, Any], timeout: int) -> dict[str, Any]:
        notes = []
        for _ in range(3):
            if self.session is None:
                self._attach()
            self.calls += 1
            call_id = f"msa-r{self.restart}-c{self.calls}"
            status, body = self._http(self.interposer, "POST", "/call",
                                      {"session_id": self.session, "call_id": call_id,
                                       "tool": tool, "args": args}, {}, timeout + 60)  # fmt: skip
            if status == 409:  # the sandbox restarted: our session is stale
                notes.append("the sandbox was restarted; reconnected (files may have been reset)")
                self._log("stale_session", call_id=call_id)
                self.session = None
                continue
            if status != 200:
                raise _Transport(f"{tool} answered {status}: {body}")
            result = body.get("result") or {}
            if not body.get("ok"):
                error = str(body.get("error", ""))
                return {"output": "\n".join([*notes, error]), "returncode": -1,
                        "exception_info": f"tool error: {error}"}  # fmt: skip
            if tool == STATUS_TOOL:  # the answer is the output; the command succeeded
                out, code = json.dumps(result, sort_keys=True), 0
            else:
                out = str(result.get("stdout", "")) + str(result.get("stderr", ""))
                code = int(result.get("exit_code", -1))
            if notes:
                out = "\n".join(notes) + "\n" + out
            return {"output": out, "returncode": code, "exception_info": ""}
        raise _Transport("the sandbox session went stale repeatedly")

    # ------------------------------------------------------------------- mini-swe-agent API

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
                ) -> dict[str, Any]:  # fmt: skip
        command = action.get("command", "")
        try:
            if command.strip() == STATUS_COMMAND:
                output = self._status(timeout or self.config.timeout)
            else:
                output = self._exec(command, cwd or self.config.cwd, timeout or self.config.timeout)
        except _Transport as exc:
            why = f"An error occurred while executing the command: {exc}"
            output = {"output": "", "returncode": -1, "exception_info": why}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if not (lines and lines[0].strip() == SENTINEL and output["returncode"] == 0):
            return
        submission = "".join(lines[1:])
        self.calls += 1
        call_id = f"msa-r{self.restart}-c{self.calls}"
        body = {"scope": self.scope, "kind": "patch",
                "payload": {"task": self.task_id, "patch": submission}}  # fmt: skip
        self._log("submit", call_id=call_id)
        try:
            status, answer = self._http(self.egress, "POST", "/effects", body,
                                        {"X-AFB-Call-Id": call_id}, 30)  # fmt: skip
        except _Transport as exc:
            self._log("submit_failed", call_id=call_id, error=str(exc))
            output["returncode"] = -1
            output["exception_info"] = f"submit failed, it may or may not have been received: {exc}"
            return
        if status not in (200, 201):
            self._log("submit_refused", call_id=call_id, status=status)
            output["returncode"] = -1
            output["exception_info"] = f"submit refused: HTTP {status} {answer}"
            return
        self._log("submit_done", call_id=call_id, effect_id=answer.get("effect_id"))
        extra = {"exit_status": "Submitted", "submission": submission}
        raise Submitted({"role": "exit", "content": submission, "extra": extra})

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {
            "environment": self.config.model_dump(mode="json"),
            "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
        }}}  # fmt: skip
