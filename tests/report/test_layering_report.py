"""runner/report is derived output: it reads the evaluator's files and helpers, never the
runtime or a benchmark, and the evaluator never imports it. It is an evaluator input all the
same (evaluator-inputs.json): `verify` and `reproduce` re-render the derived views and compare
them byte for byte, so the renderer must be the one bound to the evaluator that checks them, and
everything it imports must be digested too (the evaluator and the report alone)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.foundation.test_layering import imports_of

ROOT = Path(__file__).resolve().parents[2]
REPORT_FORBIDDEN = ("runner.runtime", "runner.cli", "runner.benchmarks", "runner.imagebuild",
                    "runner.subjects")  # fmt: skip


def test_report_imports_only_the_evaluator() -> None:
    files = sorted((ROOT / "runner/report").rglob("*.py"))
    assert files
    bad = [f"{f.relative_to(ROOT)} imports {n}" for f in files for n in imports_of(f, ROOT)
           if n.startswith(REPORT_FORBIDDEN)]  # fmt: skip
    assert bad == []


def test_evaluator_never_imports_the_report_and_digests_it() -> None:
    bad = [f"{f.relative_to(ROOT)} imports {n}"
           for f in sorted((ROOT / "runner/evaluator").rglob("*.py"))
           for n in imports_of(f, ROOT) if n.startswith("runner.report")]  # fmt: skip
    assert bad == []
    paths = json.loads((ROOT / "evaluator-inputs.json").read_text())["paths"]
    assert "runner/report" in paths
    assert not [p for p in paths if p.startswith("runner/cli")]
    files = sorted((ROOT / "runner/report").rglob("*.py"))
    own = ("runner.evaluator", "runner.report")
    outside = [f"{f.relative_to(ROOT)} imports {n}" for f in files for n in imports_of(f, ROOT)
               if n.startswith("runner.") and not n.startswith(own)]  # fmt: skip
    assert outside == []  # what the report imports is digested with it
