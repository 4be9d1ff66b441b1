"""What grading an attempt needs from the runtime: a shape-checked reader of the destination's
ledger and fresh sandboxes to grade in (the grader itself is the workload's)."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from runner.evaluator.evidence.shape import ResponseSnapshot, check_shape
from runner.evaluator.protocol.spec import ShapeCheck
from runner.runtime.attempt.api import (
    ReadLedger,
)
from runner.runtime.attempt.services import RunServices
from runner.runtime.sandbox.base import Sandbox, SandboxSpec

LEDGER_SHAPE = ShapeCheck(
    status=200,
    content_type="application/json",
    parse="json",
    scope_param="scope",
    scope_echo_path="scope",
    items_path="items",
    item_scope_field="scope",
)


def make_read_ledger(destination: tuple[str, int], timeout: float = 10.0) -> ReadLedger:
    def read_ledger(scope: str) -> tuple[list[dict[str, Any]] | None, list[str]]:
        path = f"/effects?scope={quote(scope, safe='')}"
        url = f"http://{destination[0]}:{destination[1]}{path}"
        conn = http.client.HTTPConnection(*destination, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            snap = ResponseSnapshot(
                status=resp.status,
                content_type=resp.getheader("Content-Type"),
                requested_url=url,
                final_url=url,
                body=resp.read(),
                requested_scope=scope,
            )
        except (OSError, http.client.HTTPException) as exc:
            snap = ResponseSnapshot(requested_url=url, requested_scope=scope, error=repr(exc))
        finally:
            conn.close()
        verdict = check_shape(snap, LEDGER_SHAPE, "items")
        if not verdict.ok:
            return None, list(verdict.reason_codes)
        return [dict(i) for i in verdict.value], []

    return read_ledger


def make_fresh_sandbox(
    services: RunServices, image: str, prefix: str
) -> Callable[[], contextlib.AbstractContextManager[Sandbox]]:
    counter = iter(range(1, 10_000))

    @contextlib.contextmanager
    def fresh_sandbox() -> Iterator[Sandbox]:
        spec = SandboxSpec(
            run_id=services.run_id, name_suffix=f"{prefix}-grade{next(counter)}", image=image
        )
        sb = services.sandbox(spec)
        try:
            sb.create()
            sb.start()
            yield sb
        finally:
            sb.remove()
            sb.close()

    return fresh_sandbox
