"""Regrade (`bench regrade`): old evidence judged by this evaluator, into a new run directory.

The source, a run directory or a published bundle, is never written: its protocol.json, journals
and blobs are copied (real copies: a hard link would let a later append to the new directory
change the old one) into a new directory, which this evaluator then evaluates. Each new
scorecard carries `derived_from`, the hash of the source's scorecard of the same subject, and
can be registered as such (`bench registry add` checks that the old one is registered). A
subject the source had no scorecard for gets none to derive from (derived_from stays null).
`results/regrade.json` records the source, its evidence root and both evaluator digests.

A regrade waives exactly what makes old evidence old, and nothing else:
- the run was recorded under another evaluator (no `evaluator_mismatch`; the proof names both
  digests: `evaluator_digest` judged, `recorded_evaluator_digest` recorded);
- its policy_hash binds that evaluator's result-schema versions. The policy itself must be the
  frozen one: it is re-hashed under each result-schema version this code knows of and must
  match the recorded policy_hash under one of them.
The freeze, the matrix, every cell and witness are judged as in any evaluation.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.bounded import RESULT_FILE_CAP, read_bounded
from runner.evaluator.core.canonical import canonical_bytes, fast_digest, parse_json
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.environment.stage import check_environment
from runner.evaluator.evidence.journal import JOURNALS, EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.runfile import PROTOCOL_FILE, read_protocol
from runner.evaluator.verdict.eligibility import evaluate_run

from .attest import images_of
from .results import (
    REGRADE_FILE,
    RESULTS,
    SubjectResult,
    paused_gc,
    render_results,
)
from .resultschemas import policy_matches

REGRADE_SCHEMA = "afb.regrade/1"  # read back by results._regrade_record


@dataclass(frozen=True)
class Regraded:
    out_dir: Path
    results: dict[str, SubjectResult]
    derived_from: dict[str, str]  # subject -> the source scorecard's hash


def default_out(source: Path, evaluator_digest: str) -> Path:
    """SOURCE's sibling named after this evaluator: `<name>.regraded-<12 hex>`."""
    return source.resolve().parent / f"{source.name}.regraded-{evaluator_digest[7:19]}"


def _old_scorecards(source: Path) -> dict[str, tuple[str, str]]:
    """subject -> (scorecard hash, evidence root) of each scorecard the source publishes."""
    out: dict[str, tuple[str, str]] = {}
    results = source / RESULTS
    for path in sorted(results.glob("*/scorecard.json")) if results.is_dir() else []:
        raw = read_bounded(path, RESULT_FILE_CAP, evidence=True)
        try:
            doc = parse_json(raw)
        except ValueError as exc:
            raise EvidenceError(f"{path}: not a scorecard: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("kind") != "publishable_scorecard":
            raise EvidenceError(f"{path}: not a publishable scorecard")
        # The hash a registry knows a scorecard by is over its canonical form; a file in any
        # other form could name a scorecard that was never written.
        if raw != canonical_bytes(doc) + b"\n":
            raise EvidenceError(f"{path}: not in canonical form (edited?)")
        out[str(doc["subject_id"])] = (fast_digest(doc), str(doc["evidence_root_hash"]))
    return out


def _copy_evidence(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    shutil.copy2(source / PROTOCOL_FILE, dest / PROTOCOL_FILE)
    for name in (JOURNALS, "blobs"):
        if (source / name).is_dir():
            shutil.copytree(source / name, dest / name)


def regrade(
    source: Path,
    out_dir: Path,
    evaluator_digest: str,
) -> Regraded:
    """Evaluate SOURCE's evidence with this evaluator into OUT_DIR (new; SOURCE is only read)."""
    source, out_dir = source.resolve(), out_dir.resolve()
    if not (source / PROTOCOL_FILE).is_file():
        raise InputError("not a run directory or bundle (no protocol.json)", file=str(source))
    if out_dir == source or source in out_dir.parents or out_dir in source.parents:
        raise InputError(
            "--out must lie outside the source (and not contain it)", file=str(out_dir)
        )
    if out_dir.exists():
        raise InputError("already exists; a regrade writes a new directory", file=str(out_dir))
    rp = read_protocol(source)
    if not policy_matches(rp):
        raise InputError(
            "the spec's policy does not hash to the recorded policy_hash under any known "
            "result-schema versions: not a regrade of the frozen rules",
            file=str(source / PROTOCOL_FILE),
        )
    old = _old_scorecards(source)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _copy_evidence(source, tmp)
        store = EvidenceStore(tmp)
        with paused_gc():
            evidence = LoadedEvidence.from_store(store)
            env = check_environment(rp, evidence)  # as evaluate_run decides, for the proof file
            evaluations = evaluate_run(rp, evidence, evaluator_digest, regrading=True)
        for subject, (_, root) in old.items():
            if subject in evaluations and root != evidence.evidence_root_hash:
                raise EvidenceError(
                    f"{RESULTS}/{subject}/scorecard.json: judges other evidence "
                    f"({root}, not {evidence.evidence_root_hash})"
                )
        derived = {s: h for s, (h, _) in old.items() if s in evaluations}
        artifacts = [f"{JOURNALS}/{p.name}" for p in store.journal_paths()] + [PROTOCOL_FILE]
        images = images_of(evidence, store)
        results, files = render_results(rp, evaluations, artifacts, env, derived, images, tmp)
        record = {
            "schema": REGRADE_SCHEMA,
            "source": str(source),
            "evidence_root_hash": evidence.evidence_root_hash,
            "recorded_evaluator_digest": rp.identities.evaluator_digest,
            "evaluator_digest": evaluator_digest,
            "derived_from": derived,
        }
        files[f"{RESULTS}/{REGRADE_FILE}"] = canonical_bytes(record) + b"\n"
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Regraded(out_dir, results, derived)
