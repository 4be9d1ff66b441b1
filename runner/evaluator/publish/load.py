"""Reading a written result file back: only a valid scorecard of this evaluator's schema parses
as one. The comparison gate and the registry both start here."""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.core.bounded import JSON_INPUT_CAP, read_bounded
from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import EvidenceError

from .models import (
    REPORT_SCHEMA,
    SCORECARD_SCHEMA,
    IncompleteEvidenceReport,
    PublishableScorecard,
)


def load_result(path: Path) -> PublishableScorecard | IncompleteEvidenceReport:
    """Read a written result file; only a valid scorecard parses as one."""
    try:
        doc = parse_json(read_bounded(path, JSON_INPUT_CAP, evidence=True))
    except (OSError, ValueError) as exc:
        raise EvidenceError(f"{path}: cannot read result: {exc}") from exc
    kinds = {"publishable_scorecard": SCORECARD_SCHEMA, "incomplete_evidence": REPORT_SCHEMA}
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in kinds:
        raise EvidenceError(f"{path}: neither a scorecard nor an incomplete-evidence report")
    schema = kinds[kind]
    if doc.get("schema") != schema:
        # An older evaluator's result: its shape (and its hashes' rules) are not this one's.
        raise EvidenceError(
            f"{path}: schema {doc.get('schema')!r} is not {schema!r}, the one this evaluator "
            "reads; results of different evaluators cannot be loaded or compared together"
        )
    if kind == "publishable_scorecard":
        return PublishableScorecard.model_validate(doc)
    return IncompleteEvidenceReport.model_validate(doc)
