"""A `command:` subject that tries to reach what it must not (stdlib only; runs unprivileged).

It looks for the upstream model key (its own environment, every /proc/*/environ it can open),
tries to list the run directory's parent and to read the state directories of the run's other
attempts (names from $AFB_TEST_SIBLINGS, a JSON list), then reports what it found as its one
effect: POST /effects through the egress proxy, so the report lands in the destination's ledger
(the state directory is gone after the run).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
from pathlib import Path
from urllib.parse import urlsplit


def _try_read(path: Path) -> str:
    try:
        path.read_bytes()
    except OSError as exc:
        return type(exc).__name__
    return "read"


def main() -> int:
    # What to look for: the SHA-256 of the upstream key (the key itself is never given to it).
    probe = os.environ["AFB_TEST_SECRET_SHA256"]

    def has_secret(values: list[bytes]) -> bool:
        return any(hashlib.sha256(v).hexdigest() == probe for v in values)

    state = Path(os.environ["AFB_STATE_DIR"])
    (state / "mine.txt").write_text("attempt-private")
    environ_hits, environ_readable = [], 0
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            data = (p / "environ").read_bytes()
        except OSError:
            continue
        environ_readable += 1
        if has_secret([e.partition(b"=")[2] for e in data.split(b"\0")]):
            environ_hits.append(p.name)
    siblings = {}
    for name in json.loads(Path(os.environ["AFB_TEST_SIBLINGS"]).read_text()):
        if name != state.name:
            siblings[name] = _try_read(state.parent / name / "mine.txt")
    try:
        os.listdir(state.parent)
        list_parent = "listed"
    except OSError as exc:
        list_parent = type(exc).__name__
    try:
        os.listdir(os.environ["AFB_TEST_OUT"])
        list_out = "listed"
    except OSError as exc:
        list_out = type(exc).__name__
    report = {
        "uid": os.getuid(),
        "secret_in_own_env": has_secret([v.encode() for v in os.environ.values()]),
        "openai_key": os.environ.get("OPENAI_API_KEY"),
        "openai_base_url": os.environ.get("OPENAI_BASE_URL"),
        "anthropic_base_url": os.environ.get("ANTHROPIC_BASE_URL"),
        "task_file_id": json.loads(Path(os.environ["AFB_TASK_FILE"]).read_text()).get("task_id"),
        "home_is_state": os.environ.get("HOME") == str(state),
        "environ_hits": environ_hits,
        "environ_readable": environ_readable,
        "siblings": siblings,
        "list_subject_root": list_parent,
        "list_out": list_out,
        "state": state.name,
    }
    u = urlsplit(os.environ["AFB_EGRESS_URL"])
    body = {"scope": os.environ["AFB_SCOPE"], "kind": "report", "payload": report}
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request(
        "POST", "/effects", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    status = conn.getresponse().status
    return 0 if status in (200, 201) else 1


if __name__ == "__main__":
    raise SystemExit(main())
