"""A subject that looks for the answer on the host filesystem (stdlib only; runs unprivileged).

For each path in $AFB_TEST_PROBE (a JSON list) it records what it could see: a directory's
entries, a file's SHA-256, or the error's name; then prints that report as one JSON line on
stdout (the launcher's stdout.log, which the harness reads) with its own uid.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


def _look(path: Path) -> object:
    try:
        if path.is_dir():
            return sorted(os.listdir(path))
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return type(exc).__name__


def main() -> int:
    paths = json.loads(os.environ["AFB_TEST_PROBE"])
    seen = {p: _look(Path(p)) for p in paths}
    print(json.dumps({"uid": os.getuid(), "seen": seen}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
