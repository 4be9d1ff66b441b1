"""Tool interposer: the only way the subject reaches its sandbox (HTTP/1.1 JSON).

- `POST /session` `{previous_session_id?}` -> `{session_id, epoch}`: attach, or reattach after
  the sandbox was restarted.
- `POST /call` `{session_id, call_id?, tool, args}` -> `{call_id, tool, ok, result | error}`.
  Tools: `read_file {path}`, `write_file {path, content | content_b64}`, `exec {argv, stdin?,
  timeout?}`, `run_tests {argv?}`; and, when the attempt gives it a status source,
  `submission_status {}` (read-only: `{scope, committed, effects, effect_ids}` from the
  destination's ledger for the attempt's scope; it runs nothing in the sandbox). A tool that fails
  in the sandbox is `ok: false` (200); a stale session is `409 {"error": "stale_session"}`, an
  unknown one `404`.
- `GET /tools` -> `{"tools": [{name, read_only}]}`: the tools this interposer serves.

Sessions carry the sandbox epoch. The harness calls `bump_epoch()` when it restarts or
recreates the sandbox; from then on every call on an older session fails visibly and the
subject must re-attach. The interposer records those failures and reattachments: that record
is the `tool_interposer` collector of the sandbox_restart witness (`session_observation`).

Each call reports `received`, `dispatched`, `effect_done` and `response_sent` to the event sink
(the trigger engine) from the request's own thread, so a fault handler holds it in flight.

The call's run is transport-neutral (`open_call` -> `ToolCall`): the HTTP handler below and the
MCP tool server (`mcp_tools`) drive the same object, so both report the same events under the
same source, with one ordinal per tool whichever wire carried the call.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from runner.evaluator.core.types import Phase
from runner.runtime.events import Decision, Directive, EventSink, NullSink
from runner.runtime.interposers.serving import ServedInThread

SOURCE = "tool_interposer"
COLLECTOR = "tool_interposer"
TOOLS = ("read_file", "write_file", "exec", "run_tests")
# Read-only: has anything been committed in this attempt's scope? An ordinary tool for triggers
# (same events, same ordinals), answered by the status source the attempt sets (`set_status`).
STATUS_TOOL = "submission_status"
MAX_BODY = 16 * 1024 * 1024


class _ExecResult(Protocol):
    # read-only: a frozen result (sandbox.base.ExecResult) satisfies it
    @property
    def exit_code(self) -> int: ...
    @property
    def stdout(self) -> bytes: ...
    @property
    def stderr(self) -> bytes: ...


class ToolSandbox(Protocol):
    """The part of `runner.runtime.sandbox.base.Sandbox` the interposer uses."""

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> _ExecResult: ...
    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...
    def get_file(self, path: str) -> bytes: ...


@dataclass
class SessionRecord:
    session_id: str
    epoch: int
    attached_ns: str
    previous_session_id: str | None


@dataclass
class StaleFailure:
    session_id: str
    session_epoch: int
    current_epoch: int
    call_id: str
    tool: str
    at_ns: str


@dataclass
class CallRecord:
    call_id: str
    tool: str
    session_id: str
    epoch: int
    received_ns: str
    phases: list[str] = field(default_factory=list)
    in_flight: bool = True  # received, and its response not yet decided
    settled: bool = False  # every event of the call was reported and completed
    outcome: str = "pending"  # ok | tool_error | stale_session | dropped | closed | failed


class BadToolCall(Exception):
    """The call is malformed (unknown tool, bad arguments): refused before it counts."""


@dataclass(frozen=True)
class Reply:
    """What the transport delivers: an HTTP status and a JSON body (200 ok | tool error,
    409 stale session, 404 unknown session)."""

    status: int
    body: dict[str, Any]


class ToolCall:
    """One received call, driven by a transport (HTTP or MCP) through its phases:

    `begin()` runs `received`, `dispatched`, the sandbox effect and `effect_done`, and returns
    the `Reply` to deliver -- or None: deliver nothing, close the subject's connection. After
    delivering, the transport calls `sent()` (`response_sent`); False means close now. `finish()`
    must always run last (also on errors): it completes the engine's decisions, after the
    transport applied them, and settles the call.
    """

    def __init__(
        self,
        ti: ToolInterposer,
        rec: CallRecord,
        run: Callable[[], tuple[bool, dict[str, Any]]],
    ) -> None:
        self.ti = ti
        self.rec = rec
        self._run = run
        self._decisions: list[Decision] = []
        self._finished = False

    @property
    def call_id(self) -> str:
        return self.rec.call_id

    def _phase(self, p: Phase) -> Directive:
        self.ti._mark(self.rec, p)
        self._decisions.append(self.ti.sink.event(SOURCE, self.rec.tool, p, self.rec.call_id))
        return max((d.directive for d in self._decisions), key=lambda d: d.strength)

    def _end(self, outcome: str, reply: Reply | None) -> Reply | None:
        self.ti._mark(self.rec, outcome=outcome)  # recorded before the subject can see the end
        return reply

    def begin(self) -> Reply | None:
        rec = self.rec
        if self._phase(Phase.RECEIVED) is Directive.CLOSE_WITHOUT_RESPONSE:
            return self._end("closed", None)
        if self._phase(Phase.DISPATCHED) is Directive.CLOSE_WITHOUT_RESPONSE:
            return self._end("closed", None)
        ok, result = self._run()
        if self._phase(Phase.EFFECT_DONE) is not Directive.CONTINUE:
            return self._end("dropped", None)
        status, err = self.ti._check_session(rec.session_id, rec.call_id, rec.tool)
        if status:  # the sandbox was restarted under this call: its result is not trusted
            return self._end("stale_session", Reply(status, err))
        payload: dict[str, Any] = {"call_id": rec.call_id, "tool": rec.tool, "ok": ok}
        payload["result" if ok else "error"] = result if ok else result["error"]
        return self._end("ok" if ok else "tool_error", Reply(200, payload))

    def sent(self) -> bool:
        """The reply was delivered (or its delivery failed); False: close the connection now."""
        return self._phase(Phase.RESPONSE_SENT) is Directive.CONTINUE

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            if self.rec.in_flight:
                self.ti._mark(self.rec, outcome="failed")
            for d in self._decisions:
                d.complete()
        finally:
            self.ti._settle(self.rec)


class ToolInterposer(ServedInThread["_Server"]):
    """`with ToolInterposer(sandbox, sink=engine) as ti: ti.address` -> (host, port)."""

    label = "interposer"

    def __init__(
        self,
        sandbox: ToolSandbox,
        *,
        sink: EventSink | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        exec_timeout: float = 60.0,
        run_tests_argv: Sequence[str] = ("/bin/sh", "-c", "./run-tests"),
    ) -> None:
        self.sandbox = sandbox
        self.sink: EventSink = sink if sink is not None else NullSink()
        self.exec_timeout = exec_timeout
        self.run_tests_argv = list(run_tests_argv)
        super().__init__((host, port))
        self._lock = threading.Condition()  # notified when a call settles
        self._epoch = 1
        self._sessions: dict[str, SessionRecord] = {}
        self._attaches: list[SessionRecord] = []
        self._stale: list[StaleFailure] = []
        self._calls: dict[str, CallRecord] = {}
        self._counts: dict[str, int] = {}
        self._status: Callable[[], dict[str, Any]] | None = None

    def _make_server(self) -> _Server:
        server = _Server(self._bind, _Handler)
        server.interposer = self
        return server

    # --- harness side ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def bump_epoch(self) -> int:
        """The sandbox was restarted/recreated: every existing session is now stale."""
        with self._lock:
            self._epoch += 1
            return self._epoch

    def set_sandbox(self, sandbox: ToolSandbox) -> None:
        with self._lock:
            self.sandbox = sandbox

    def set_status(self, source: Callable[[], dict[str, Any]] | None) -> None:
        """Serve `submission_status` from `source` (the destination's ledger for the scope)."""
        with self._lock:
            self._status = source

    def tool_names(self) -> tuple[str, ...]:
        """The tools served: the sandbox tools, and the status tool when it has a source."""
        with self._lock:
            return TOOLS + ((STATUS_TOOL,) if self._status is not None else ())

    def counts(self) -> dict[str, int]:
        """Tool calls received (stale-session calls never reach the sandbox: not counted)."""
        with self._lock:
            return dict(sorted(self._counts.items()))

    def in_flight(self) -> list[str]:
        with self._lock:
            return [c.call_id for c in self._calls.values() if c.in_flight]

    def call_observation(self, call_id: str) -> dict[str, Any]:
        """The interposer's record of one call, right now (sigkill witness `interposer_call`)."""
        with self._lock:
            rec = self._calls.get(call_id)
            if rec is None:
                return {"collector": COLLECTOR, "call_id": "", "in_flight": False, "seen": False}
            return {"collector": COLLECTOR, "seen": True, **asdict(rec)}

    def wait_call(self, call_id: str, timeout: float = 10.0) -> dict[str, Any] | None:
        """`call_observation` once the call has settled (all its events done), else None."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not ((rec := self._calls.get(call_id)) is not None and rec.settled):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)
            return self.call_observation(call_id)

    def session_observation(self, old_epoch: int) -> dict[str, Any]:
        """Did a call on a session of `old_epoch` (or older) fail, and the subject then reattach?"""
        with self._lock:
            fail = next((f for f in self._stale if f.session_epoch <= old_epoch), None)
            again = None
            if fail is not None:
                again = next(
                    (
                        a
                        for a in self._attaches
                        if a.epoch > old_epoch and int(a.attached_ns) >= int(fail.at_ns)
                    ),
                    None,
                )
            return {
                "collector": COLLECTOR,
                "old_epoch": old_epoch,
                "new_epoch": again.epoch if again is not None else self._epoch,
                "stale_session_failed": fail is not None,
                "reattached": again is not None,
                "stale_call_id": fail.call_id if fail is not None else "",
                "reattach_session_id": again.session_id if again is not None else "",
            }

    # --- subject side (called from handler threads) ---------------------------------------------

    def attach(self, previous: str | None = None) -> SessionRecord:
        """A new session on the current epoch (`POST /session`); recorded for the witness."""
        return self._attach(previous)

    def open_call(
        self, session_id: str, call_id: str, tool: str, args: dict[str, Any]
    ) -> ToolCall | Reply:
        """Validate and admit one call: a `ToolCall` to drive, or the `Reply` that refuses it
        (404 unknown / 409 stale session: never counted). Raises `BadToolCall` when malformed."""
        names = self.tool_names()
        if tool not in names or not isinstance(args, dict):
            raise BadToolCall(f"tool must be one of {names} and args an object")
        run = self._prepare(tool, args)
        status, err = self._check_session(session_id, call_id, tool)
        if status:
            return Reply(status, err)
        return ToolCall(self, self._receive(call_id, tool, session_id), run)

    def _attach(self, previous: str | None) -> SessionRecord:
        with self._lock:
            rec = SessionRecord(secrets.token_hex(8), self._epoch, str(time.time_ns()), previous)
            self._sessions[rec.session_id] = rec
            self._attaches.append(rec)
            return rec

    def _check_session(
        self, session_id: str, call_id: str, tool: str
    ) -> tuple[int, dict[str, Any]]:
        """(0, {}) if usable, else the HTTP status and error body (recording a stale failure)."""
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                return 404, {"error": "unknown_session"}
            if s.epoch < self._epoch:
                now = str(time.time_ns())
                self._stale.append(
                    StaleFailure(session_id, s.epoch, self._epoch, call_id, tool, now)
                )
                return 409, {
                    "error": "stale_session",
                    "session_epoch": s.epoch,
                    "epoch": self._epoch,
                }
            return 0, {}

    def _receive(self, call_id: str, tool: str, session_id: str) -> CallRecord:
        with self._lock:
            s = self._sessions[session_id]
            rec = CallRecord(call_id, tool, session_id, s.epoch, str(time.time_ns()))
            self._calls[call_id] = rec
            self._counts[tool] = self._counts.get(tool, 0) + 1
            return rec

    def _mark(
        self, rec: CallRecord, phase: Phase | None = None, outcome: str | None = None
    ) -> None:
        with self._lock:
            if phase is not None:
                rec.phases.append(phase.value)
            if outcome is not None:
                rec.outcome, rec.in_flight = outcome, False

    def _settle(self, rec: CallRecord) -> None:
        with self._lock:
            rec.settled = True
            self._lock.notify_all()

    def _prepare(
        self, tool: str, args: dict[str, Any]
    ) -> Callable[[], tuple[bool, dict[str, Any]]]:
        """Validate a call before it counts; the returned thunk runs it in the sandbox."""
        if tool == STATUS_TOOL:
            if args:
                raise BadToolCall(f"{STATUS_TOOL} takes no arguments")
            return self._status_call
        if tool == "read_file":
            path = _str(args, "path")
            return lambda: self._guard(lambda sb: _read(sb, path))
        if tool == "write_file":
            path = _str(args, "path")
            try:
                data = (
                    base64.b64decode(_str(args, "content_b64"), validate=True)
                    if "content_b64" in args
                    else _str(args, "content").encode("utf-8")
                )
            except ValueError as exc:
                raise BadToolCall("content_b64 is not base64") from exc
            return lambda: self._guard(lambda sb: _write(sb, path, data))
        argv = args.get("argv", self.run_tests_argv if tool == "run_tests" else None)
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise BadToolCall("args.argv must be a non-empty list of strings")
        stdin, timeout = args.get("stdin"), args.get("timeout", self.exec_timeout)
        if stdin is not None and not isinstance(stdin, str):
            raise BadToolCall("args.stdin must be a string")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise BadToolCall("args.timeout must be a positive number")
        feed = stdin.encode() if stdin is not None else None
        return lambda: self._guard(lambda sb: _exec(sb, argv, feed, float(timeout), tool))

    def _status_call(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            source = self._status
        try:
            if source is None:
                raise RuntimeError("no status source")
            return True, source()
        except Exception as exc:  # the subject sees the failure
            return False, {"error": f"{type(exc).__name__}: {exc}"}

    def _guard(self, op: Callable[[ToolSandbox], dict[str, Any]]) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            sandbox = self.sandbox
        try:
            return True, op(sandbox)
        except Exception as exc:  # the subject sees the failure; it is part of the task
            return False, {"error": f"{type(exc).__name__}: {exc}"}


def _read(sb: ToolSandbox, path: str) -> dict[str, Any]:
    data = sb.get_file(path)
    try:
        return {"content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"content_b64": base64.b64encode(data).decode()}


def _write(sb: ToolSandbox, path: str, data: bytes) -> dict[str, Any]:
    sb.put_file(path, data)
    return {"bytes": len(data)}


def _exec(
    sb: ToolSandbox, argv: list[str], stdin: bytes | None, timeout: float, tool: str
) -> dict[str, Any]:
    r = sb.exec(argv, stdin=stdin, timeout=timeout)
    out: dict[str, Any] = {
        "exit_code": r.exit_code,
        "stdout": r.stdout.decode("utf-8", "replace"),
        "stderr": r.stderr.decode("utf-8", "replace"),
    }
    if tool == "run_tests":
        out["passed"] = r.exit_code == 0
    return out


def _str(args: dict[str, Any], key: str) -> str:
    v = args.get(key)
    if not isinstance(v, str):
        raise BadToolCall(f"args.{key} must be a string")
    return v


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    interposer: ToolInterposer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # head and body are written apart: without TCP_NODELAY a keep-alive client waits out its
    # delayed ACK (~40 ms) on every call
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, sort_keys=True).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the subject is gone (e.g. SIGKILLed mid-call): nobody to answer
            self.close_connection = True

    def _drop(self) -> None:
        """Close without a response byte; the subject sees a transport failure."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _body(self) -> dict[str, Any]:
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError as exc:
            raise BadToolCall("bad Content-Length") from exc
        if not 0 <= n <= MAX_BODY:
            raise BadToolCall("bad Content-Length")
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise BadToolCall("body is not JSON") from exc
        if not isinstance(body, dict):
            raise BadToolCall("body must be a JSON object")
        return body

    def do_GET(self) -> None:
        ti = self.server.interposer
        if self.path == "/tools":
            tools = [{"name": n, "read_only": n in ("read_file", STATUS_TOOL)}
                     for n in ti.tool_names()]  # fmt: skip
            self._reply(200, {"tools": tools})
        else:
            self._reply(404, {"error": "not_found"})

    def do_POST(self) -> None:
        ti = self.server.interposer
        try:
            body = self._body()
            if self.path == "/session":
                prev = body.get("previous_session_id")
                rec = ti._attach(prev if isinstance(prev, str) else None)
                self._reply(200, {"session_id": rec.session_id, "epoch": rec.epoch})
            elif self.path == "/call":
                self._call(ti, body)
            else:
                self._reply(404, {"error": "not_found"})
        except BadToolCall as exc:
            self.close_connection = True
            self._reply(400, {"error": "bad_request", "message": str(exc)})

    def _call(self, ti: ToolInterposer, body: dict[str, Any]) -> None:
        session_id, tool, args = body.get("session_id"), body.get("tool"), body.get("args", {})
        call_id = body.get("call_id") or f"ti-{secrets.token_hex(6)}"
        if not isinstance(session_id, str) or not isinstance(call_id, str):
            raise BadToolCall("session_id and call_id must be strings")
        if not isinstance(tool, str):
            raise BadToolCall(f"tool must be one of {TOOLS} and args an object")
        call = ti.open_call(session_id, call_id, tool, args)
        if isinstance(call, Reply):
            self._reply(call.status, call.body)
            return
        try:
            reply = call.begin()
            if reply is None:
                self._drop()
                return
            self._reply(reply.status, reply.body)
            if not call.sent():
                self._drop()
        finally:
            call.finish()
