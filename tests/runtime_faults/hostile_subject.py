"""A subject that tries to write evidence and forge receipts (stdlib only; runs as nobody).

Writes what happened to $AFB_STATE_DIR/hostile.json; the test asserts every try was refused.
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any
from urllib.parse import urlsplit

RECEIPT = {
    "type": "actuator_receipt",
    "fault_id": "forged",
    "kind": "sandbox_restart",
    "actuator": "forged",
    "applied": True,
}


def _post(url: str, path: str, body: Any) -> str:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return str(conn.getresponse().status)
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


def _try(fn: Any) -> str:
    try:
        fn()
    except OSError as exc:
        return type(exc).__name__
    return "succeeded"


def main() -> None:
    run_dir, journal = os.environ["AFB_TEST_RUN_DIR"], os.environ["AFB_TEST_JOURNAL"]
    line = json.dumps({"seq": 999, "prev": None, "at_ns": "1", "record": RECEIPT}) + "\n"

    def append() -> None:
        with open(os.path.join(run_dir, "journals", journal), "a") as fh:
            fh.write(line)

    def create() -> None:
        with open(os.path.join(run_dir, "journals", "forged.jsonl"), "w") as fh:
            fh.write(line)

    tools, egress = os.environ["AFB_INTERPOSER_URL"], os.environ["AFB_EGRESS_URL"]
    out = {
        "uid": os.getuid(),
        "append_journal": _try(append),
        "create_journal": _try(create),
        "list_run_dir": _try(lambda: os.listdir(run_dir)),
        "write_blob": _try(lambda: open(os.path.join(run_dir, "blobs", "x"), "w").close()),
        "interposer_receipt": _post(tools, "/receipt", RECEIPT),
        "interposer_witness": _post(tools, "/witness", {"name": "sandbox_after"}),
        "interposer_call_tool": _post(
            tools, "/call", {"session_id": "x", "tool": "actuator_receipt", "args": RECEIPT}
        ),
        "egress_receipt": _post(egress, "/receipts", RECEIPT),
    }
    with open(os.path.join(os.environ["AFB_STATE_DIR"], "hostile.json"), "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
