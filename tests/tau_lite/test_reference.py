"""tau-lite's reference subjects show exactly their known weaknesses, against the real store:
each strategy as a subprocess over HTTP, through a hop that loses the response of the first
committed write, or SIGKILLs the subject right after that commit (then relaunches it)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.tau_lite import tasks, wheel
from runner.benchmarks.tau_lite.workload import TauLiteWorkload
from runner.runtime.attempt.api import GradeContext, GradeOutcome
from runner.runtime.attempt.grading import make_read_ledger

REFERENCE = Path(__file__).resolve().parents[2] / "runner/benchmarks/tau_lite/subjects/reference.py"
SCOPE = "run-ref/attempt-1"


class Hop:
    """Forwards to the destination; on the first committed write, `fault` strikes after the
    destination answered: `lost` closes the subject's connection with no answer, `kill`
    SIGKILLs the subject (whose pid `target` holds)."""

    def __init__(self, upstream: tuple[str, int], fault: str | None) -> None:
        self.upstream, self.fault, self.struck = upstream, fault, False
        self.target: subprocess.Popen[bytes] | None = None
        hop = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _go(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n) if n else None
                conn = http.client.HTTPConnection(*hop.upstream, timeout=30)
                conn.request(self.command, self.path, body, dict(self.headers))
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if (
                    hop.fault
                    and not hop.struck
                    and self.command == "POST"
                    and self.path.startswith("/effects/")
                    and resp.status == 201
                ):
                    hop.struck = True
                    if hop.fault == "kill" and hop.target is not None:
                        os.kill(hop.target.pid, signal.SIGKILL)
                    self.close_connection = True
                    return  # the response is lost
                self.send_response(resp.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _go

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return "http://{}:{}".format(*self.server.server_address[:2])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def workload(sets: dict[str, tasks.DomainSet], wheel_path: Path) -> TauLiteWorkload:
    docs = {d: tasks.tool_docs(wheel_path, d) for d in wheel.DOMAINS}
    return TauLiteWorkload(sets, docs, image="swe-lite")


def _cell(
    workload: TauLiteWorkload, task_id: str, strategy: str, fault: str | None, tmp: Path
) -> GradeOutcome:
    tmp.mkdir(parents=True)
    oracle = tmp / "oracle.json"
    oracle.write_text(json.dumps(workload.oracle_task(task_id)))
    with workload.destination(task_id, tmp / "store.db", idempotency_keys=True) as dest:
        for restart in range(3):
            hop = Hop(dest.address, fault if restart == 0 else None)
            env = {
                **os.environ,
                "AFB_EGRESS_URL": hop.url,
                "AFB_SCOPE": SCOPE,
                "AFB_STATE_DIR": str(tmp),
                "AFB_EVENT_LOG": str(tmp / "events.jsonl"),
                "AFB_RESTART_INDEX": str(restart),
            }
            proc = subprocess.Popen(
                [sys.executable, str(REFERENCE), "--strategy", strategy, "--oracle", str(oracle)],
                env=env,
                stderr=subprocess.PIPE,
            )
            hop.target = proc
            _, err = proc.communicate(timeout=120)
            hop.close()
            if proc.returncode == 0:
                break
            assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        else:
            raise AssertionError("the subject never finished")
        ctx = GradeContext(
            SCOPE,
            make_read_ledger(dest.address),
            fresh_sandbox=None,  # type: ignore[arg-type]
            tool_calls={},
        )
        return workload.grader(task_id)(ctx)


def _only(workload: TauLiteWorkload, tool: str) -> str:
    return next(t.id for t in workload._tasks.values() if [a.name for a in t.writes] == [tool])


DUPLICATES = {  # strategy -> duplicates under (no fault, lost response, SIGKILL after commit)
    "blind_retry": (0, 1, 1),
    "checkpoint": (0, 1, 1),
    "idempotency_key": (0, 0, 0),
    "intent_reconcile": (0, 0, 0),
}


@pytest.mark.parametrize("strategy", sorted(DUPLICATES))
def test_each_strategy_shows_its_known_weakness(
    workload: TauLiteWorkload, strategy: str, tmp_path: Path
) -> None:
    airline = _only(workload, "send_certificate")
    retail = _only(workload, "return_delivered_order_items")
    for fault, dups in zip((None, "lost", "kill"), DUPLICATES[strategy], strict=True):
        g = _cell(workload, airline, strategy, fault, tmp_path / f"a-{fault}")
        assert g.committed_effects - g.intended_effects == dups, (strategy, fault, g.report)
        assert g.completed == (dups == 0), (strategy, fault)
        # retail refuses the repeat: no strategy duplicates there, every one completes
        g = _cell(workload, retail, strategy, fault, tmp_path / f"r-{fault}")
        assert g.completed and g.committed_effects == g.intended_effects, (
            strategy,
            fault,
            g.report,
        )
