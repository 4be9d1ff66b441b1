"""Evaluate a run directory from its evidence alone, write its results, and verify them.

RUN_DIR/results/<subject>/ holds proof.json and either terminal-records.jsonl, scorecard.json,
scorecard.md and cell-scores.jsonl (eligible) or incomplete-evidence.json, incomplete-evidence.md
and cell-history.jsonl (not); the .md files only when [publication].outputs lists markdown. The
results
are derived: `evaluate` replaces them whole, so a stale scorecard never survives an ineligible
re-evaluation, and `verify` re-derives them byte for byte. A draft run (protocol not frozen) also
gets results/draft-diagnostics.jsonl and .md (diagnostics.py: per-cell, "draft: not a result").
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.evaluator.core.bounded import read_bounded
from runner.evaluator.core.canonical import (
    canonical_bytes,
    fast_canonical_bytes,
    is_digest,
    parse_json,
)
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.filesets import compare_sets
from runner.evaluator.environment.stage import NO_ENVIRONMENT, EnvironmentCheck, check_environment
from runner.evaluator.evidence.journal import JOURNALS, EvidenceStore
from runner.evaluator.evidence.layout import check as check_layout
from runner.evaluator.evidence.layout import run_record_problems
from runner.evaluator.evidence.loading import ATTEMPT_JOURNAL, LoadedEvidence
from runner.evaluator.protocol.runfile import (
    PROTOCOL_FILE,
    RunProtocol,
    consistency_problems,
    read_protocol,
)
from runner.evaluator.protocol.subjects import subject_role
from runner.evaluator.verdict.eligibility import SubjectEvaluation, evaluate_run, evaluate_subjects

from .attest import Image, images_of, statements
from .build import build_scorecard, incomplete_report
from .compare import build, comparison_md, gate, needs_conformance
from .diagnostics import diagnostics_files
from .models import (
    CELL_HISTORY_FILE,
    CELL_SCORES_FILE,
    IncompleteEvidenceReport,
    PublishableScorecard,
)
from .paired import CellOutcomes, cell_outcomes
from .render import report_md, scorecard_md
from .resultschemas import policy_matches
from .truthfulness import truth_source

RESULTS = "results"
# Derived views (runner/report) written beside the results: built from them, bound by nothing,
# and not re-derived here; verify and reproduce pass over exactly these two paths.
DERIVED_VIEWS = frozenset({f"{RESULTS}/report.html", f"{RESULTS}/junit.xml"})


@dataclass(frozen=True)
class SubjectResult:
    evaluation: SubjectEvaluation
    scorecard: PublishableScorecard | None
    report: IncompleteEvidenceReport | None


def _json(model: object) -> bytes:
    return fast_canonical_bytes(model.model_dump(mode="json", by_alias=True)) + b"\n"  # type: ignore[attr-defined]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Suspend the cyclic garbage collector while a run is evaluated.

    Evaluation allocates millions of small acyclic objects (records, terminal records, rows) and
    keeps them alive; every automatic collection would re-scan all of them, which at a million
    cells costs more than the evaluation. Nothing is freed later than it would be by reference
    counting; cycles (if any) are collected once the collector is back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def derive(
    run_dir: Path, evaluator_digest: str
) -> tuple[RunProtocol, dict[str, SubjectResult], dict[str, bytes]]:
    """Evaluate and render in memory: (protocol, per-subject results, relative path -> bytes)."""
    with paused_gc():
        return _derive(run_dir, evaluator_digest)


def _derive(
    run_dir: Path, evaluator_digest: str
) -> tuple[RunProtocol, dict[str, SubjectResult], dict[str, bytes]]:
    rp = read_protocol(run_dir)
    store = EvidenceStore(run_dir, create=False)
    evidence = LoadedEvidence.from_store(store)
    env = check_environment(rp, evidence)  # what evaluate_run decides by, for the proof file
    # A regraded directory (publish/regrade.py) re-derives as a regrade by this evaluator; its
    # record is checked against the evidence once that is read, and written again as it was.
    regrade = _regrade_record(run_dir, rp, evaluator_digest)
    evaluations = evaluate_run(rp, evidence, evaluator_digest, regrading=regrade is not None)
    artifacts = [f"{JOURNALS}/{n}" for n in store.journal_names()] + [PROTOCOL_FILE]
    derived = None
    if regrade is not None:
        _, record = regrade
        if record.get("evidence_root_hash") != evidence.evidence_root_hash:
            raise EvidenceError(f"{RESULTS}/{REGRADE_FILE}: names other evidence than the run's")
        derived = record["derived_from"]
    out, files = render_results(
        rp, evaluations, artifacts, env, derived, images=images_of(evidence, store),
        run_dir=run_dir,
    )  # fmt: skip
    if regrade is not None:
        files[f"{RESULTS}/{REGRADE_FILE}"] = regrade[0]
    for rel, data in diagnostics_files(rp, store).items():  # a draft's only (diagnostics.py)
        files[f"{RESULTS}/{rel}"] = data
    return rp, out, files


REGRADE_FILE = "regrade.json"
REGRADE_CAP = 1 << 20  # a regrade record: a few digests per subject (README "Limits")


def judging_evaluator(run_dir: Path) -> str:
    """The evaluator whose results a run directory holds: the regrading one for a regraded
    directory (results/regrade.json), else the one that recorded the run."""
    rp = read_protocol(run_dir)
    path = run_dir / RESULTS / REGRADE_FILE
    if os.path.lexists(path):  # anything but a regular file is refused by the bounded read
        try:
            record = parse_json(read_bounded(path, REGRADE_CAP, evidence=True))
        except ValueError as exc:
            raise EvidenceError(f"{RESULTS}/{REGRADE_FILE}: not JSON: {exc}") from exc
        if isinstance(record, dict) and isinstance(record.get("evaluator_digest"), str):
            return str(record["evaluator_digest"])
    return rp.identities.evaluator_digest


def _regrade_record(
    run_dir: Path, rp: RunProtocol, evaluator_digest: str
) -> tuple[bytes, dict[str, Any]] | None:
    """The run's regrade record, when it is one made by this evaluator of this evidence."""
    path = run_dir / RESULTS / REGRADE_FILE
    if not os.path.lexists(path):
        return None
    raw = read_bounded(path, REGRADE_CAP, evidence=True)
    try:
        record = parse_json(raw)
    except ValueError as exc:
        raise EvidenceError(f"{RESULTS}/{REGRADE_FILE}: not JSON: {exc}") from exc
    ok = (
        isinstance(record, dict)
        and record.get("schema") == "afb.regrade/1"
        and raw == canonical_bytes(record) + b"\n"
        and isinstance(record.get("derived_from"), dict)
        and set(record["derived_from"]) <= {s.id for s in rp.spec().subjects}
        and all(isinstance(v, str) and is_digest(v) for v in record["derived_from"].values())
        and record.get("recorded_evaluator_digest") == rp.identities.evaluator_digest
        # a regrade judges old evidence: the run's own evaluator has nothing to regrade
        and record.get("evaluator_digest") != rp.identities.evaluator_digest
    )
    ok = ok and policy_matches(rp)  # evaluate_run waives policy-version drift only after this
    if not ok:
        raise EvidenceError(f"{RESULTS}/{REGRADE_FILE}: not a regrade record of this run")
    if record.get("evaluator_digest") != evaluator_digest:
        return None  # regraded by another evaluator: judged as old evidence (evaluator_mismatch)
    return raw, record


def render_results(
    rp: RunProtocol,
    evaluations: dict[str, SubjectEvaluation],
    artifacts: list[str],
    env: EnvironmentCheck = NO_ENVIRONMENT,
    derived_from: Mapping[str, str] | None = None,
    images: Sequence[Image] = (),
    run_dir: Path | None = None,
) -> tuple[dict[str, SubjectResult], dict[str, bytes]]:
    """Publication of decided subjects: per-subject results and the files (path -> bytes).

    The protocol's policy decides what is written: [scoring].measures the measures a scorecard
    carries, [comparison] the rules each scorecard carries and the in-run comparison applies,
    [publication].outputs the formats (JSON always: the gate, the registry and verify read it;
    Markdown only when listed). `derived_from` (subject -> old scorecard hash) is set by a
    regrade only. Each scorecard gets its in-toto statement (attest.py), naming `images`.
    With `run_dir` (the evidence's directory) each scorecard carries its truthfulness section.
    """
    files: dict[str, bytes] = {}
    out = _render(
        rp, iter(sorted(evaluations.items())), artifacts, env, derived_from, images,
        files.__setitem__, hold=True, run_dir=run_dir,
    )  # fmt: skip
    return out, files


def _render(
    rp: RunProtocol,
    subjects: Iterator[tuple[str, SubjectEvaluation]],
    artifacts: Iterable[str],
    env: EnvironmentCheck,
    derived_from: Mapping[str, str] | None,
    images: Sequence[Image],
    put: Callable[[str, bytes], None],
    hold: bool,
    run_dir: Path | None = None,
) -> dict[str, SubjectResult]:
    """`render_results` over subjects given in subject-id order, each file handed to `put` as
    soon as it is made (the same files, in the same order). `hold=False` keeps no subject's
    lines: each evaluation is dropped once its files are out (`SubjectEvaluation.held`)."""
    spec = rp.spec()
    markdown = "markdown" in spec.publication.outputs
    roles = {s.id: subject_role(s.agent) for s in spec.subjects}
    out: dict[str, SubjectResult] = {}
    cards_json: dict[str, bytes] = {}  # what the statements bind
    outcomes: dict[str, CellOutcomes | None] = {}
    strings: dict[str, str] = {}  # slot ids, task ids, strata: one copy for every subject
    paired = len(rp.identities.subject_config_hashes) > 1
    for subject, ev in subjects:
        base = f"{RESULTS}/{subject}/"
        put(base + "proof.json", _json(ev.proof))
        kept = ev if hold else SubjectEvaluation(ev.proof, b"", held=False)
        if ev.proof.decision == "eligible":
            # Terminal records of an ineligible subject are not written: they carry its subject
            # outcomes. The proof commits to them by hash; the journals keep the raw evidence.
            put(base + "terminal-records.jsonl", ev.terminal_jsonl)
            card, rows = build_scorecard(
                ev,
                rp.slots,
                spec.scoring.measures,
                spec.comparison,
                (derived_from or {}).get(subject),
                # who duplicated is a duplicates measure: carried only where the spec scores it
                None
                if run_dir is None or "duplicate_effects" not in spec.scoring.measures
                else truth_source(run_dir, spec, subject),
                roles.get(subject),
            )
            del ev
            put(base + CELL_SCORES_FILE, rows)
            if paired:  # the paired tests' compact view, only where a comparison can be
                outcomes[subject] = cell_outcomes(rows, strings)
            del rows
            cards_json[base + "scorecard.json"] = _json(card)
            put(base + "scorecard.json", cards_json[base + "scorecard.json"])
            if markdown:
                put(base + "scorecard.md", scorecard_md(card).encode())
            out[subject] = SubjectResult(kept, card, None)
        else:
            rep, rows = incomplete_report(ev, artifacts)
            del ev
            put(base + CELL_HISTORY_FILE, rows)
            del rows
            put(base + "incomplete-evidence.json", _json(rep))
            if markdown:
                put(base + "incomplete-evidence.md", report_md(rep).encode())
            out[subject] = SubjectResult(kept, None, rep)
        del kept  # nothing of this subject's lines outlives its turn (when not held)
    if env.proof is not None:
        put(f"{RESULTS}/environment-conformance.json", canonical_bytes(env.proof) + b"\n")
    published = [(f"{RESULTS}/{s}/", r.scorecard) for s, r in out.items() if r.scorecard]
    for rel, data in statements(cards_json, published, images).items():
        put(rel, data)
    eligible = [s for s, r in out.items() if r.scorecard is not None]
    cards = [c for s in eligible if (c := out[s].scorecard) is not None]
    if len(cards) >= 2 and not gate(cards):
        # Subjects of one run share one environment record: its conformance proof is theirs,
        # named only when the rules require conformance.
        env_proof = cards[0].environment_conformance if needs_conformance(cards) else None
        comparison = build(cards, env_proof, [outcomes.get(s) for s in eligible])
        put(f"{RESULTS}/comparison.json", _json(comparison))
        if markdown:
            put(f"{RESULTS}/comparison.md", comparison_md(comparison).encode())
    return out


def evaluate_into(
    run_dir: Path, evaluator_digest: str
) -> tuple[RunProtocol, dict[str, SubjectResult]]:
    """`derive` + `write_results` as a stream: the same files, written as they are made, one
    subject's terminal lines held at a time (a million cells fit in memory this way, not held
    whole). Results go to a directory aside and replace RUN_DIR/results only when all are
    written; on any error nothing of them remains. The returned evaluations hold no lines
    (`SubjectEvaluation.held`)."""
    with paused_gc():
        tmp = run_dir / f".{RESULTS}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            rp, out = _derive_into(run_dir, evaluator_digest, _writer(tmp))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _swap(run_dir, tmp)
        return rp, out


def _writer(tmp: Path) -> Callable[[str, bytes], None]:
    def put(rel: str, data: bytes) -> None:
        path = tmp / rel.removeprefix(RESULTS + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return put


def _derive_into(
    run_dir: Path,
    evaluator_digest: str,
    put: Callable[[str, bytes], None],
) -> tuple[RunProtocol, dict[str, SubjectResult]]:
    """`_derive`, each file handed to `put` as it is made."""
    rp = read_protocol(run_dir)
    store = EvidenceStore(run_dir, create=False)
    names = store.journal_names()  # listed once: the journals read are the artifacts named
    evidence = LoadedEvidence.from_store(store, names)
    env = check_environment(rp, evidence)  # what evaluate_subjects decides by, for the proof file
    regrade = _regrade_record(run_dir, rp, evaluator_digest)
    artifacts = _Artifacts(names)
    del names
    images = images_of(evidence, store)
    derived = None if regrade is None else regrade[1]["derived_from"]

    def subjects() -> Iterator[tuple[str, SubjectEvaluation]]:
        stream = evaluate_subjects(rp, evidence, evaluator_digest, regrading=regrade is not None)
        for n, item in enumerate(stream):
            # the evidence root is known from the first subject on
            root = evidence.evidence_root_hash
            if n == 0 and regrade is not None and regrade[1].get("evidence_root_hash") != root:
                msg = "names other evidence than the run's"
                raise EvidenceError(f"{RESULTS}/{REGRADE_FILE}: {msg}")
            yield item
            del item  # not held while the next subject is read

    out = _render(rp, subjects(), artifacts, env, derived, images, put, False, run_dir)
    if regrade is not None:
        put(f"{RESULTS}/{REGRADE_FILE}", regrade[0])
    for rel, data in diagnostics_files(rp, store).items():  # a draft's only (diagnostics.py)
        put(f"{RESULTS}/{rel}", data)
    return rp, out


class _Artifacts:
    """`[f"journals/{n}" for n in names] + ["protocol.json"]`, iterated as often as asked, held
    as one bytes object (NUL-separated: no file name holds a NUL): a million names as str
    would be about 90 MB for the whole evaluation, used only by incomplete-evidence reports."""

    def __init__(self, names: list[str]) -> None:
        self._blob = "\0".join(names).encode("utf-8", "surrogatepass")
        self._empty = not names

    def __iter__(self) -> Iterator[str]:
        if not self._empty:
            for name in self._blob.decode("utf-8", "surrogatepass").split("\0"):
                yield f"{JOURNALS}/{name}"
        yield PROTOCOL_FILE


def write_results(run_dir: Path, files: dict[str, bytes]) -> None:
    """Replace RUN_DIR/results atomically (write aside, then swap)."""
    tmp = run_dir / f".{RESULTS}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, data in files.items():
        path = tmp / rel.removeprefix(RESULTS + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    _swap(run_dir, tmp)


def clear_leftovers(run_dir: Path) -> None:
    """Remove `.results.tmp-<pid>` / `.results.old-<pid>` of a writer that died (SIGKILL mid
    evaluate): the strict layout refuses them, and results are always derived anew. A live
    writer's (its pid still running) is left alone."""
    for entry in run_dir.glob(f".{RESULTS}.*-*"):
        pid = entry.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or not ours to signal): not a leftover
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            continue


def _swap(run_dir: Path, tmp: Path) -> None:
    """`tmp` becomes RUN_DIR/results (the old results, if any, removed after)."""
    clear_leftovers(run_dir)
    final = run_dir / RESULTS
    old = run_dir / f".{RESULTS}.old-{os.getpid()}"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def unregistered_journals(rp: RunProtocol, journals: Iterable[str]) -> list[str]:
    """Attempt journals named for no cell the protocol registers (their records would only make
    the run ineligible; a journal no cell owns is refused as an unexpected file, as evidence
    that stands without a signature)."""
    from runner.evaluator.protocol.matrix import cell_id

    registered = {
        cell_id(s.slot_id, h)[7:23]
        for h in rp.identities.subject_config_hashes.values()
        for s in rp.slots
    }
    return [
        f"{JOURNALS}/{name}: names no cell of the protocol (unexpected file)"
        for name in journals
        if (m := ATTEMPT_JOURNAL.fullmatch(name.removesuffix(".jsonl"))) and m[1] not in registered
    ]


def verify(run_dir: Path, evaluator_digest: str) -> list[str]:
    """Recompute every hash, chain and address; return problems, the first one first.

    The run directory is first held against its strict layout (evidence/layout.py): an
    unexpected entry, a symlink, a FIFO, an unreferenced or missing blob, an unrecorded torn
    tail is named before any file is read, and nothing is read past a size cap or through a
    symlink. Nothing is written in the run directory or through it (the evaluation's own spill
    files live in TMPDIR, and are removed).
    """
    layout, refs, problems = check_layout(run_dir)
    if problems:
        return problems
    try:
        rp = read_protocol(run_dir)
    except EvidenceError as exc:
        return [str(exc)]
    consistency = consistency_problems(rp)
    try:
        regraded = _regrade_record(run_dir, rp, evaluator_digest) is not None
    except EvidenceError as exc:
        return [str(exc)]
    if regraded:  # the recorded policy_hash binds the recording evaluator's schema versions
        consistency = [p for p in consistency if not p.startswith("policy_hash")]
    problems += [f"{PROTOCOL_FILE}: {p}" for p in consistency]
    if refs is not None:
        problems += run_record_problems(rp, refs.started)
    problems += unregistered_journals(rp, layout.journals)
    if any("spec_text does not parse" in p for p in consistency):
        return problems  # nothing below can be derived from a protocol without its spec
    try:
        _, _, files = derive(run_dir, evaluator_digest)
    except EvidenceError as exc:
        return [*problems, str(exc)]
    if not os.path.lexists(run_dir / RESULTS):
        return problems  # not evaluated yet: the evidence alone verified
    # Size before content: a file no derived file is named for, or of another size than the one
    # derived under its name, is refused by its lstat size alone; only an equal-sized
    # candidate is read (bounded), one at a time.
    present = {rel for rel in layout.results if rel not in DERIVED_VIEWS}
    for rel, side in compare_sets(files, present):
        if side == "present":
            problems.append(f"{rel}: not derivable from the evidence (unexpected file)")
        elif side == "expected":
            problems.append(f"{rel}: missing")
        elif layout.result_sizes[rel] != len(files[rel]):
            problems.append(f"{rel}: differs from what the evidence derives")
        else:
            try:
                data = read_bounded(run_dir / rel, len(files[rel]), evidence=True)
            except EvidenceError as exc:
                problems.append(str(exc))
                continue
            if data != files[rel]:
                problems.append(f"{rel}: differs from what the evidence derives")
    holders = {str(Path(rel).parent) for rel in [*files, *DERIVED_VIEWS]}
    for d in layout.result_dirs:
        if not any(h == d or h.startswith(d + "/") for h in holders):
            problems.append(f"{d}: not derivable from the evidence (unexpected directory)")
    return problems
