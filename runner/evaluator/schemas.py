"""JSON Schemas generated from the typed models; `bench schema` writes them, a test checks drift.

The evaluator's boundary models only: a subject's config grammar and the cassette format are
runtime (runner/runtime/schemas.py writes theirs beside them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from runner.evaluator.core.types import Frozen
from runner.evaluator.evidence.records import Record
from runner.evaluator.protocol.freeze import FreezeRecord
from runner.evaluator.protocol.identities import Identities
from runner.evaluator.protocol.matrix import Cell, Slot
from runner.evaluator.protocol.runfile import RunProtocol
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.witness import WitnessContract, WitnessVerdict
from runner.evaluator.publish.compare import Comparison
from runner.evaluator.publish.diagnostics import CellDiagnostic
from runner.evaluator.publish.models import (
    CellHistory,
    CellScore,
    IncompleteEvidenceReport,
    PublishableScorecard,
)
from runner.evaluator.publish.registry import RegistryEntry
from runner.evaluator.trust.head import HeadPredicate
from runner.evaluator.trust.run import RunPredicate
from runner.evaluator.trust.window import KeyWindow
from runner.evaluator.verdict.eligibility import EligibilityProof
from runner.evaluator.verdict.outcomes import TerminalRecord


class JournalLine(Frozen):
    """One journal line: a record in its hash-chained envelope (see journal.py)."""

    seq: int
    prev: str | None
    at_ns: str
    record: Record


MODELS: dict[str, type[BaseModel]] = {
    "journal-line": JournalLine,
    "run-protocol": RunProtocol,
    "terminal-record": TerminalRecord,
    "eligibility-proof": EligibilityProof,
    "incomplete-evidence-report": IncompleteEvidenceReport,
    "publishable-scorecard": PublishableScorecard,
    "cell-score": CellScore,  # one line of a scorecard's cell-scores.jsonl
    "cell-history": CellHistory,  # one line of a report's cell-history.jsonl
    "draft-diagnostic": CellDiagnostic,  # one line of a draft's results/draft-diagnostics.jsonl
    "comparison": Comparison,
    "registry-entry": RegistryEntry,
    "run-signature-predicate": RunPredicate,  # signatures/run.dsse.json's in-toto predicate
    "append-only-head-predicate": HeadPredicate,  # registry.head.dsse.json's predicate
    "key-window": KeyWindow,  # keys/trusted/<name>.window.toml: a trusted key's validity window
    "spec": Spec,
    "identities": Identities,
    "slot": Slot,
    "cell": Cell,
    "freeze-record": FreezeRecord,
    "witness-contract": WitnessContract,
    "witness-verdict": WitnessVerdict,
}


def register(name: str, model: type[BaseModel]) -> None:
    MODELS[name] = model


def render(model: type[BaseModel]) -> str:
    schema = model.model_json_schema(mode="validation", by_alias=True)
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(
    directory: Path, check: bool = False, models: Mapping[str, type[BaseModel]] | None = None
) -> list[str]:
    """Write (or with check=True only compare) every schema of `models` (default: the
    evaluator's) into `directory`, removing others; returns the names that differ."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    chosen = MODELS if models is None else models
    expected = {f"{name}.schema.json": render(model) for name, model in sorted(chosen.items())}
    for fname, text in expected.items():
        path = directory / fname
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            changed.append(fname)
            if not check:
                path.write_text(text, encoding="utf-8")
    for stale in sorted(p.name for p in directory.glob("*.schema.json")):
        if stale not in expected:
            changed.append(stale)
            if not check:
                (directory / stale).unlink()
    return changed
