"""The derived views checked: `bench verify` and `bench reproduce` re-render report.html and
junit.xml from the run directory and compare them byte for byte with the files beside the results.

Why: the views are what a person actually reads, yet no hash binds them (they stay outside
signatures/SHA256SUMS so `bench report` can rebuild them). Rendering is deterministic (no clock,
no absolute path, no unordered iteration), so the one check that holds is re-rendering. The page
is streamed into a hash, never held whole; the file on disk is refused by its lstat size first
and read bounded. A view that is absent is not a problem (a view that failed to render is
reported by `evaluate` and the results stand); a view that is present must be exactly this one.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from runner.evaluator.core.bounded import RESULT_FILE_CAP, sha256_bounded
from runner.evaluator.core.errors import EvidenceError

from . import JUNIT_FILE, REPORT_FILE
from .html import stream_html
from .junit import render_junit
from .load import RESULTS, load_run

VIEWS = (REPORT_FILE, JUNIT_FILE)


def _digest(chunks: Iterable[bytes]) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    for chunk in chunks:
        h.update(chunk)
        n += len(chunk)
    return "sha256:" + h.hexdigest(), n


def rendered(run_dir: Path, name: str) -> tuple[str, int]:
    """(sha256, size) of the view `name` as this checkout renders it from the run directory."""
    if name == REPORT_FILE:
        return _digest(p.encode() for p in stream_html(load_run(run_dir)))
    return _digest([render_junit(load_run(run_dir, timelines=False))])


def view_problems(run_dir: Path) -> list[str]:
    """Each present view that is not byte for byte what the run directory renders to."""
    problems: list[str] = []
    for name in VIEWS:
        rel = f"{RESULTS}/{name}"
        try:
            st = os.lstat(run_dir / rel)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{rel}: not a regular file")
            continue
        try:
            want, size = rendered(run_dir, name)
        except (EvidenceError, ValueError, OSError) as exc:
            problems.append(f"{rel}: cannot be re-rendered from the run directory: {exc}")
            continue
        if st.st_size != size:
            problems.append(
                f"{rel}: differs from what the run directory renders ({st.st_size} bytes, "
                f"rendered {size}): edited, or made by other report code (`bench report`)"
            )
            continue
        try:
            got = sha256_bounded(run_dir / rel, min(size, RESULT_FILE_CAP), evidence=True)
        except EvidenceError as exc:
            problems.append(str(exc))
            continue
        if got != want:
            problems.append(
                f"{rel}: differs from what the run directory renders (same size, other bytes): "
                "edited, or made by other report code (`bench report`)"
            )
    return problems
