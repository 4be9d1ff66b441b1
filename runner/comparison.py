"""`bench compare`: publishable scorecards, each inside its signed bundle and re-derived from its
evidence (runner/verification.py), gated by each scorecard's own comparison rules and the
environment pair check, retired results refused; the comparison written only when it stands."""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.publish.compare import Comparison, comparison_md
from runner.evaluator.publish.compare import compare as compare_results
from runner.evaluator.publish.registry import Registry
from runner.verification import scorecard_check


def compare(
    results: list[Path],
    out_dir: Path,
    registry: Registry,
    trusted_dir: Path | None,
    *,
    allow_unsigned: bool = False,
) -> tuple[Comparison | None, list[str]]:
    """The comparison (written to `out_dir`: comparison.json and .md), or None and the reasons
    it is refused (nothing written)."""
    check = scorecard_check(trusted_dir, require_signature=not allow_unsigned)
    comparison, reasons = compare_results(results, registry.retired, check)
    if comparison is None:
        return None, reasons
    out_dir.mkdir(parents=True, exist_ok=True)
    data = comparison.model_dump(mode="json", by_alias=True)
    (out_dir / "comparison.json").write_bytes(canonical_bytes(data) + b"\n")
    (out_dir / "comparison.md").write_text(comparison_md(comparison))
    return comparison, reasons
