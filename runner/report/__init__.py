"""Reports people look at: a self-contained HTML report and JUnit XML, derived from a run.

Derived, not evidence: they are built from protocol.json, the journals and results/ (never
the other way round), no hash binds them and `bench verify` does not re-derive them. This
package may read runner.evaluator's files and helpers; the evaluator never imports it, so it
does not move `evaluator_digest`.

    write_report(run_dir) -> RUN_DIR/results/report.html
    write_junit(run_dir)  -> RUN_DIR/results/junit.xml
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .html import render_html, stream_html
from .junit import render_junit
from .load import RESULTS, load_run

REPORT_FILE = "report.html"
JUNIT_FILE = "junit.xml"


def _write(path: Path, chunks: Iterable[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        for chunk in chunks:
            fh.write(chunk)
    tmp.replace(path)
    return path


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report (default RUN_DIR/results/report.html) and return its path."""
    chunks = (piece.encode() for piece in stream_html(load_run(run_dir)))
    return _write(out or run_dir / RESULTS / REPORT_FILE, chunks)


def write_junit(run_dir: Path, out: Path | None = None) -> Path:
    """Write JUnit XML (default RUN_DIR/results/junit.xml) and return its path."""
    data = render_junit(load_run(run_dir, timelines=False))
    return _write(out or run_dir / RESULTS / JUNIT_FILE, [data])


__all__ = ["load_run", "render_html", "render_junit", "write_junit", "write_report"]
