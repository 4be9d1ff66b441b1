"""A TCP prober process that lives in an attempt's network namespace, driven over pipes.

Started once when a fault that needs it is set up (`AttemptNetwork.prober()`), so a witness
pays for one request/reply instead of `ip netns exec python` start-up. The process is
`ip netns exec <ns> python -I -S -c <server>` (ip execs in place): it reports its own netns
inode at start-up, which is checked against the named namespace, carries the run's AFB_RUN
marker (so `sweep` finds a leftover), and exits when its stdin closes (e.g. the runner died).

Protocol: one JSON request line, two JSON reply lines. For `probe`, the server starts a
non-blocking connect to every target in order and replies `sent` as soon as each connect()
call has returned -- by then each SYN has already gone through the namespace's netfilter
output hook (the hook runs inside the sending syscall), so a caller can read a rule's counter
between the two replies. It then waits until every target either connected, failed, or passed
its own `wait_s` (a handshake the kernel completed while the prober was not scheduled still
counts: readiness is checked before the deadline), closes every socket (an unanswered SYN is
never retransmitted: the first retransmission comes after 1 s) and replies `done` with one
result per target.

Failure when unsure: if the prober is dead, slow or answers nonsense, every target of that
probe is reported unreachable with the error, so a control endpoint fails its check.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from runner.runtime.host import naming, paths

PROBER_ROLE = "netns-prober"
START_TIMEOUT = 10.0
_REPLY_SLACK = 2.0  # beyond a probe's longest wait, before the prober counts as hung

_SERVER = r"""
import json, os, select, socket, sys, time
EINPROGRESS = 115

def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

def probe(req):
    socks = []
    for host, port, wait in req["targets"]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        t0 = time.monotonic()
        rc = s.connect_ex((host, int(port)))
        socks.append([s, t0, float(wait), rc, None])
    reply({"sent": [x[3] for x in socks]})
    for x in socks:
        if x[3] not in (0, EINPROGRESS):
            x[4] = (False, os.strerror(x[3]), 0.0)
    while True:
        open_ = [x for x in socks if x[4] is None]
        if not open_:
            break
        timeout = max(min(x[1] + x[2] for x in open_) - time.monotonic(), 0)
        _, w, _ = select.select([], [x[0] for x in open_], [], timeout)
        now = time.monotonic()
        for x in open_:  # a completed handshake counts even if we were scheduled late
            if x[0] in w:
                err = x[0].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                x[4] = (err == 0, os.strerror(err) if err else "", now - x[1])
            elif now - x[1] >= x[2]:
                x[4] = (False, "timeout", now - x[1])
    for x in socks:
        x[0].close()
    reply({"done": [
        {"reachable": r[0], "error": r[1], "elapsed_ms": round(r[2] * 1e3, 3)}
        for r in (x[4] for x in socks)
    ]})

reply({"ready": True, "pid": os.getpid(), "netns_inode": os.stat("/proc/self/ns/net").st_ino})
for line in iter(sys.stdin.readline, ""):
    try:
        probe(json.loads(line))
    except Exception as e:
        reply({"error": repr(e)})
"""


class ProberError(RuntimeError):
    pass


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    wait_s: float  # how long a connect may take before it counts as unreachable

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"


class NetnsProber:
    """One prober process in `netns`; thread-safe (one probe at a time)."""

    def __init__(self, run_id: str, netns: str) -> None:
        self.run_id = naming.check_run_id(run_id)
        self.netns = netns
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._lock = threading.Lock()
        self._broken = False  # out of step with the protocol once: never used again
        self.pid: int | None = None

    def start(self) -> NetnsProber:
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            naming.ENV_RUN: self.run_id,
            naming.ENV_ROLE: PROBER_ROLE,
        }
        argv = ["ip", "netns", "exec", self.netns, sys.executable, "-I", "-S", "-c", _SERVER]
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, bufsize=0,
        )  # fmt: skip
        try:
            hello = self._read_line(time.monotonic() + START_TIMEOUT)
            want = os.stat(paths.NETNS_DIR / self.netns).st_ino
            if not hello.get("ready") or hello.get("netns_inode") != want:
                raise ProberError(f"prober not in netns {self.netns}: {hello}")
            self.pid = int(hello["pid"])
        except BaseException:
            self.close()
            raise
        return self

    @property
    def alive(self) -> bool:
        return not self._broken and self._proc is not None and self._proc.poll() is None

    def _read_line(self, deadline: float) -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.stdout is None:
            raise ProberError("prober not running")
        fd = proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProberError("prober reply timed out")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ProberError(f"prober exited ({proc.poll()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        got = json.loads(line)
        if not isinstance(got, dict) or "error" in got:
            raise ProberError(f"prober: {got}")
        return got

    def probe(
        self, targets: list[Target], *, between: Any = None
    ) -> tuple[list[dict[str, Any]], Any]:
        """Connect to every target from inside the namespace; one result per target.

        `between` (optional, no arguments) runs after every SYN has left through the output
        hook and before the results are awaited; its return value is passed back (the
        partition witness reads its rule counter there).
        """
        mid: Any = None
        if not targets:
            raise ValueError("nothing to probe")
        with self._lock:
            try:
                proc = self._proc
                if proc is None or proc.stdin is None or not self.alive:
                    raise ProberError("prober not running")
                req = {"targets": [[t.host, t.port, t.wait_s] for t in targets]}
                deadline = time.monotonic() + max(t.wait_s for t in targets) + _REPLY_SLACK
                proc.stdin.write((json.dumps(req) + "\n").encode())
                sent = self._read_line(deadline)["sent"]
                if between is not None:
                    mid = between()
                done = self._read_line(deadline)["done"]
                if not isinstance(done, list) or len(done) != len(targets):
                    raise ProberError(f"prober: {done}")
                return [
                    {"target": t.name, "reachable": bool(d["reachable"]),
                     "error": str(d["error"]), "elapsed_ms": d["elapsed_ms"], "connect_rc": s}
                    for t, d, s in zip(targets, done, sent, strict=True)
                ], mid  # fmt: skip
            except (ProberError, OSError, ValueError, KeyError, TypeError) as exc:
                self._kill()
                err = f"probe_failed: {exc}"
                return [{"target": t.name, "reachable": False, "error": err} for t in targets], mid
            except BaseException:
                self._kill()
                raise

    def _kill(self) -> None:
        self._broken = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=5)

    def close(self) -> None:
        """EOF on stdin ends the server; kill it if it does not go. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=2)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait(timeout=5)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
