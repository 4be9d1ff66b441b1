"""Evaluator benchmark (run on demand; not a test): DESIGN §4-§6 at 1,000,000 cells.

    cd /work/main && uv run python tests/perf/bench_evaluator.py [--cells 1000000]
        [--evidence full|terminal] [--ineligible 1] [--check]

Generates a spec of TASKS tasks x (baseline + 4 fault kinds) x 1 seed x 4 subjects (TASKS =
cells / 20; 50,000 tasks = 1,000,000 cells), synthesizes one attempt per cell with the records a
real run writes (started, trigger, lifecycle, actuator receipt, witness observations, tool calls,
grade, ended: 14 records for a faulted cell, 4 for a baseline one), and measures each stage:

- resolve:    load the spec, resolve the matrix, compute the identities, build the RunProtocol;
- synth:      build the records (not the evaluator's cost; reported for scale);
- leaves:     one evidence-root leaf per record (RFC 8785 of {at_ns, record}) and the root;
- terminals:  group the attempts and compute every cell's TerminalRecord;
- proof:      `_decide` per subject (coverage, reasons, terminal_records_hash, sealed proof);
- publish:    scorecard (eligible subjects) or incomplete-evidence report (the others);
- serialize:  the derived files (proof.json, terminal-records.jsonl, scorecard/report json+md);
- derive:     the whole derive-equivalent in one go (evaluate_run + publication + files), which
              is what `results.derive` does after reading the journals.

`--evidence full` (default up to 100,000 cells) holds every record in memory, like
`LoadedEvidence`, and runs the real `evaluate_run`. `--evidence terminal` (default above) streams
the evidence one cell at a time (records -> grouped attempts -> TerminalRecord, records dropped),
because 12 records x 1M cells do not fit in the memory target as Python objects; the leaves stage
is then measured over the first 100,000 cells' records and scaled linearly (marked `~`).

The stages run with the cyclic GC paused, as `results.derive` runs them.
Peak memory is ru_maxrss after each stage (monotone: the process's high-water mark so far).
`ratio` is the stage's wall time over plain hashlib.sha256 over the same canonical bytes the stage
hashes (leaves: the leaf documents; others: the terminal records' canonical lines).
`--check` also re-canonicalizes every hashed document with the reference RFC 8785 encoder and
asserts the evaluator's bytes are identical.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.evaluator import eligibility as el  # noqa: E402
from runner.evaluator import results as results_module  # noqa: E402
from runner.evaluator.canonical import canonical_bytes  # noqa: E402
from runner.evaluator.eligibility import (  # noqa: E402
    LoadedEvidence,
    SubjectEvaluation,
    _decide,
    evaluate_run,
    evidence_root,
    leaf,
)
from runner.evaluator.identities import compute  # noqa: E402
from runner.evaluator.inputs import project_root  # noqa: E402
from runner.evaluator.matrix import Slot, resolve  # noqa: E402
from runner.evaluator.matrix import cell_id as make_cell_id  # noqa: E402
from runner.evaluator.outcomes import TerminalRecord, group_attempts, terminal_record  # noqa: E402
from runner.evaluator.publication import (  # noqa: E402
    PublishableScorecard,
    build_scorecard,
    incomplete_report,
)
from runner.evaluator.records import (  # noqa: E402
    ActuatorReceipt,
    AttemptEnded,
    AttemptStarted,
    GraderResult,
    LifecycleTransition,
    ToolCallCount,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.render import report_md, scorecard_md  # noqa: E402
from runner.evaluator.runfile import RunProtocol, consistency_problems  # noqa: E402
from runner.evaluator.spec import FaultKind, load_spec  # noqa: E402
from runner.evaluator.witness import load_contracts  # noqa: E402
from tests.evidence.synth import GOOD, NOOP, frozen_record  # noqa: E402

try:  # results.derive also writes a comparison of a run's eligible subjects, where it exists
    from runner.evaluator.compare import build, comparison_md, gate

    COMPARE: tuple[Any, Any, Any] | None = (build, comparison_md, gate)
except ImportError:  # pragma: no cover
    COMPARE = None

EVALUATOR = "sha256:" + "0" * 64
FAULTS = [
    ("kill", "sigkill_mid_tool_call", "submit_patch", "effect_done"),
    ("lose", "lost_response", "submit_patch", "effect_done"),
    ("part", "network_partition", "submit_patch", "received"),
    ("restart", "sandbox_restart", "write_file", "response_sent"),
]
# The evaluator's canonical encoder (the reference one before the fast path existed).
FAST: Callable[[Any], bytes] = getattr(el, "fast_canonical_bytes", canonical_bytes)
CELL_ID: Callable[[str, str], str] = getattr(el, "_cell_id", make_cell_id)
LINE: Callable[[TerminalRecord], bytes] = getattr(
    el, "terminal_line", lambda t: canonical_bytes(t.model_dump(mode="json"))
)
PAUSED_GC: Callable[[], contextlib.AbstractContextManager[None]] = getattr(
    results_module, "paused_gc", contextlib.nullcontext
)
LEAF_SAMPLE = 100_000  # cells whose leaves are hashed in terminal mode


def make_spec(tasks: int, subjects: int) -> str:
    rows = ",\n".join(
        f'  {{ id = "task-{i:06d}", bucket = "{("easy", "medium", "hard")[i % 3]}" }}'
        for i in range(tasks)
    )
    out = [
        'schema = "afb.spec/1"',
        '[protocol]\nid = "perf-eval"\nversion = "1"',
        '[[tools]]\nname = "write_file"',
        '[[tools]]\nname = "submit_patch"\nirreversible = true',
        f'[[task_sets]]\nid = "perf"\nbuckets = ["easy", "medium", "hard"]\ntasks = [\n{rows}\n]',
    ]
    for n in range(subjects):
        out.append(
            f'[[subjects]]\nid = "s{n}"\nagent = "reference:blind_retry"\n'
            f"config = {{ max_retries = {n} }}"
        )
    for fid, kind, tool, phase in FAULTS:
        trigger = f'{{ tool = "{tool}", ordinal = 1, phase = "{phase}" }}'
        out.append(f'[[faults]]\nid = "{fid}"\nkind = "{kind}"\ntrigger = {trigger}')
    out.append("[matrix]\nseeds = [1]")
    out.append("[attempts]\ncap = 2")
    out.append(
        '[scoring]\nscorer_version = "1"\n'
        'measures = ["completion", "duplicate_effects", "recovery_overhead"]'
    )
    out.append('[grader]\nid = "g"\nversion = "1"')
    return "\n\n".join(out) + "\n"


# ------------------------------------------------------------------------------- synthesis

Entry = tuple[str, int, Any]


def attempt_records(
    subject: str, shash: str, cell: str, slot: Slot, i: int, noop: bool
) -> list[Entry]:
    """One attempt's records in journal order, as tests/evidence/synth.py writes them."""
    kind = slot.schedule.kind
    name = f"{cell[7:23]}-a1"
    ref = {"cell_id": cell, "attempt": 1}
    outcome = ("completed", "failed", "duplicate", "completed")[i % 4]
    recs: list[Any] = [
        AttemptStarted(**ref, slot_id=slot.slot_id, subject_id=subject,
                       subject_config_hash=shash, fault_id=slot.schedule.fault_id, kind=kind)
    ]  # fmt: skip
    reached = kind is not FaultKind.NONE
    if reached:
        fid = slot.schedule.fault_id
        trig = slot.schedule.trigger or {}
        recs.append(TriggerReached(**ref, fault_id=fid, call_id="call-3", tool=trig["tool"],
                                   ordinal=trig["ordinal"], phase=trig["phase"]))  # fmt: skip
        for state in ("scheduled", "armed"):
            recs.append(LifecycleTransition(**ref, fault_id=fid, state=state))
        recs.append(ActuatorReceipt(**ref, fault_id=fid, kind=kind, actuator="bench",
                                    applied=True))  # fmt: skip
        recs.append(LifecycleTransition(**ref, fault_id=fid, state="injected"))
        for oname, obs in (NOOP if noop else GOOD)[kind].items():
            recs.append(WitnessObservation(**ref, fault_id=fid, kind=kind, name=oname,
                                           observation=obs))  # fmt: skip
        recs.append(LifecycleTransition(**ref, fault_id=fid, state="witnessed"))
        recs.append(LifecycleTransition(**ref, fault_id=fid, state="recovered"))
    done = outcome != "failed"
    calls = 8 + (i % 3) if reached else 8
    recs.append(ToolCallCount(**ref, calls=calls, by_tool={"write_file": calls}))
    recs.append(GraderResult(
        **ref, grader_id="g", grader_version="1", scorer_version="1", completed=done,
        intended_effects=1, committed_effects=2 if outcome == "duplicate" else int(done),
        shape_ok=True,
    ))  # fmt: skip
    wall = 1_000_000 + (i % 7) * 50_000 if reached else 1_000_000
    recs.append(AttemptEnded(**ref, outcome="subject_finished", trigger_reached=reached,
                             wall_ns=str(wall)))  # fmt: skip
    return [(name, n, r) for n, r in enumerate(recs, start=1)]


class Bench:
    def __init__(self, cells: int, ineligible: int, tmp: Path) -> None:
        self.subjects = 4
        self.tasks = max(1, cells // (5 * self.subjects))
        self.ineligible = {f"s{self.subjects - 1 - n}" for n in range(ineligible)}
        self.spec_path = tmp / "perf-eval.toml"
        self.spec_path.write_text(make_spec(self.tasks, self.subjects), encoding="utf-8")

    def resolve(self) -> RunProtocol:
        spec = load_spec(self.spec_path)
        matrix = resolve(spec)
        ids = compute(spec, self.spec_path, matrix, evaluator=EVALUATOR)
        return RunProtocol(
            run_id="bench",
            spec_name=self.spec_path.name,
            spec_text=self.spec_path.read_text(encoding="utf-8"),
            identities=ids,
            slots=matrix.slots,
            contracts=list(load_contracts(project_root() / "witnesses").values()),
            freeze_record=frozen_record(ids),
        )

    def cells(self, rp: RunProtocol) -> Iterator[tuple[str, str, str, Slot, int]]:
        for subject, shash in sorted(rp.identities.subject_config_hashes.items()):
            for i, slot in enumerate(rp.slots):
                yield subject, shash, CELL_ID(slot.slot_id, shash), slot, i

    def records(self, subject: str, shash: str, cell: str, slot: Slot, i: int) -> list[Entry]:
        # An ineligible subject: every 97th lost_response cell's actuator was a no-op.
        noop = (
            subject in self.ineligible
            and slot.schedule.kind is FaultKind.LOST_RESPONSE
            and i % 97 == 0
        )
        return attempt_records(subject, shash, cell, slot, i, noop)


# ---------------------------------------------------------------------------------- measuring


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sha_time(lines: list[bytes]) -> float:
    t = time.perf_counter()
    for b in lines:
        hashlib.sha256(b).digest()
    return time.perf_counter() - t


class Table:
    def __init__(self, cells: int) -> None:
        self.cells = cells
        self.rows: list[tuple[str, float, float, str, bool]] = []

    def add(self, stage: str, wall: float, sha: float | None = None, approx: bool = False) -> None:
        ratio = f"{wall / sha:,.0f}x" if sha else "-"
        self.rows.append((stage, wall, rss_mib(), ratio, approx))

    def print(self) -> None:
        print(f"{'stage':<12} {'cells':>10} {'wall s':>9} {'peak MiB':>9} {'ratio/sha256':>12}")
        for stage, wall, mib, ratio, approx in self.rows:
            w = f"{'~' if approx else ''}{wall:.2f}"
            print(f"{stage:<12} {self.cells:>10,} {w:>9} {mib:>9.0f} {ratio:>12}")


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _json(model: Any) -> bytes:
    return FAST(model.model_dump(mode="json", by_alias=True)) + b"\n"


def publish(rp: RunProtocol, evaluations: dict[str, SubjectEvaluation]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for subject, ev in sorted(evaluations.items()):
        if ev.proof.decision == "eligible":
            out[subject] = build_scorecard(ev, rp.slots)
        else:
            out[subject] = incomplete_report(ev, ["journals/x.jsonl", "protocol.json"])
    return out


def serialize(evaluations: dict[str, SubjectEvaluation], results: dict[str, Any]) -> int:
    """The files `results.derive` returns, held like it holds them; returns their total size."""
    files: dict[str, bytes] = {}
    for subject, ev in sorted(evaluations.items()):
        base = f"results/{subject}/"
        files[base + "proof.json"] = _json(ev.proof)
        r = results[subject]
        if ev.proof.decision == "eligible":
            files[base + "terminal-records.jsonl"] = b"".join(
                LINE(t) + b"\n" for t in ev.terminal_records
            )
            files[base + "scorecard.json"] = _json(r)
            files[base + "scorecard.md"] = scorecard_md(r).encode()
        else:
            files[base + "incomplete-evidence.json"] = _json(r)
            files[base + "incomplete-evidence.md"] = report_md(r).encode()
    cards = [r for r in results.values() if isinstance(r, PublishableScorecard)]
    if COMPARE is not None and len(cards) >= 2 and not COMPARE[2](cards):
        comparison = COMPARE[0](cards, cards[0].environment_conformance)
        files["results/comparison.json"] = _json(comparison)
        files["results/comparison.md"] = COMPARE[1](comparison).encode()
    return sum(len(b) for b in files.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=1_000_000)
    ap.add_argument("--evidence", choices=["full", "terminal"], default=None)
    ap.add_argument("--ineligible", type=int, default=1, help="subjects with a no-op actuator")
    ap.add_argument("--check", action="store_true", help="compare bytes with the RFC 8785 ref")
    args = ap.parse_args()
    mode = args.evidence or ("full" if args.cells <= 100_000 else "terminal")

    with tempfile.TemporaryDirectory() as tmp:
        b = Bench(args.cells, args.ineligible, Path(tmp))
        rp, t_resolve = timed(b.resolve)
    n_cells = len(rp.slots) * len(rp.identities.subject_config_hashes)
    table = Table(n_cells)
    table.add("resolve", t_resolve)
    print(f"{n_cells:,} cells ({b.tasks:,} tasks x 5 x 1 seed x {b.subjects} subjects), "
          f"evidence mode: {mode}, ineligible subjects: {sorted(b.ineligible)}")  # fmt: skip
    gc.collect()

    # `results.derive` evaluates with the cyclic GC paused; so do the stages here.
    with PAUSED_GC():
        if mode == "full":
            run_full(b, rp, table, args.check)
        else:
            run_terminal(b, rp, table, args.check)
    table.print()


def leaves_of(entries: list[Entry]) -> tuple[list[str], list[bytes]]:
    docs = [{"at_ns": "1700000000000000000", "record": r.model_dump(mode="json")}
            for _, _, r in entries]  # fmt: skip
    return [leaf(d["at_ns"], d["record"]) for d in docs], [FAST(d) for d in docs]


def run_full(b: Bench, rp: RunProtocol, table: Table, check: bool) -> None:
    def synth() -> list[Entry]:
        out: list[Entry] = []
        for c in b.cells(rp):
            out.extend(b.records(*c))
        return out

    entries, t = timed(synth)
    table.add("synth", t)
    print(f"{len(entries):,} records")

    def leaves() -> LoadedEvidence:
        lv = [leaf("1700000000000000000", r.model_dump(mode="json")) for _, _, r in entries]
        return LoadedEvidence(entries, evidence_root(lv), [])

    evidence, t = timed(leaves)
    lines = [
        FAST({"at_ns": "1700000000000000000", "record": r.model_dump(mode="json")})
        for _, _, r in entries
    ]
    if check:
        for (_, _, r), line in zip(entries, lines, strict=True):
            doc = {"at_ns": "1700000000000000000", "record": r.model_dump(mode="json")}
            assert canonical_bytes(doc) == line
    table.add("leaves+root", t, sha_time(lines))
    del lines

    grouped, t_group = timed(lambda: group_attempts(evidence.entries))

    def terminals() -> dict[str, list[TerminalRecord]]:
        spec = rp.spec()
        contracts = rp.contract_map()
        out: dict[str, list[TerminalRecord]] = {}
        for subject, shash in sorted(rp.identities.subject_config_hashes.items()):
            rows = sorted((make_cell_id(s.slot_id, shash), s) for s in rp.slots)
            out[subject] = [
                terminal_record(cid, s.slot_id, subject, s.stratum, s.schedule.kind,
                                s.schedule.parameters, grouped.get(cid), spec.attempts,
                                contracts.get(s.schedule.kind.value), spec.scoring.scorer_version)
                for cid, s in rows
            ]  # fmt: skip
        return out

    terms, t = timed(terminals)
    table.add("terminals", t_group + t)
    grouped.clear()
    finish(b, rp, table, terms, evidence, check)

    gc.collect()

    def derive_equiv() -> int:
        evaluations = evaluate_run(rp, evidence, EVALUATOR)
        return serialize(evaluations, publish(rp, evaluations))

    size, t = timed(derive_equiv)
    table.add("derive", t + table.rows[2][1])  # + leaves, as derive computes them while reading
    print(f"derived files: {size / 2**20:,.1f} MiB")


def run_terminal(b: Bench, rp: RunProtocol, table: Table, check: bool) -> None:
    # Leaves over a sample, scaled: the records of all cells do not fit as Python objects.
    sample: list[Entry] = []
    for k, c in enumerate(b.cells(rp)):
        if k >= LEAF_SAMPLE:
            break
        sample.extend(b.records(*c))
    n_records_sample = len(sample)
    (_, lines), _ = timed(lambda: leaves_of(sample))
    t0 = time.perf_counter()
    lv = [leaf("1700000000000000000", r.model_dump(mode="json")) for _, _, r in sample]
    root = evidence_root(lv)
    t_leaves = time.perf_counter() - t0
    t_sha = sha_time(lines)
    scale = table.cells / min(LEAF_SAMPLE, table.cells)
    sample.clear()
    del lines, lv
    gc.collect()
    table.add("leaves+root", t_leaves * scale, t_sha * scale, approx=scale != 1)
    print(f"leaves: {n_records_sample:,} records of {min(LEAF_SAMPLE, table.cells):,} cells, "
          f"x{scale:.0f}")  # fmt: skip

    spec = rp.spec()
    contracts = rp.contract_map()
    t_synth = 0.0

    per_cell: dict[str, dict[str, tuple[str, Slot]]] = {}
    for subject, _, cid, slot, _ in b.cells(rp):
        per_cell.setdefault(subject, {})[cid] = (cid, slot)

    def terminals() -> dict[str, list[TerminalRecord]]:
        nonlocal t_synth
        out: dict[str, list[TerminalRecord]] = {}
        for subject, shash in sorted(rp.identities.subject_config_hashes.items()):
            rows = []
            index = {s.slot_id: i for i, s in enumerate(rp.slots)}
            for cid, (_, s) in sorted(per_cell.pop(subject).items()):
                t = time.perf_counter()
                recs = b.records(subject, shash, cid, s, index[s.slot_id])
                t_synth += time.perf_counter() - t
                rows.append(terminal_record(
                    cid, s.slot_id, subject, s.stratum, s.schedule.kind, s.schedule.parameters,
                    group_attempts(recs).get(cid), spec.attempts,
                    contracts.get(s.schedule.kind.value), spec.scoring.scorer_version,
                ))  # fmt: skip
            out[subject] = rows
        return out

    terms, t = timed(terminals)
    table.add("synth", t_synth)
    table.add("terminals", t - t_synth)
    evidence = LoadedEvidence([], root, [])
    finish(b, rp, table, terms, evidence, check)
    # The derive-equivalent: the stages summed (evaluate_run would group every record at once).
    total = sum(w for s, w, *_ in table.rows if s not in ("synth",))
    table.rows.append(("derive", total, rss_mib(), "-", True))


def finish(
    b: Bench,
    rp: RunProtocol,
    table: Table,
    terms: dict[str, list[TerminalRecord]],
    evidence: LoadedEvidence,
    check: bool,
) -> None:
    def proofs() -> dict[str, SubjectEvaluation]:
        ids = rp.identities
        run_reasons: list[str] = ["protocol_inconsistent"] if consistency_problems(rp) else []
        return {
            subject: _decide(rp, subject, ids.subject_config_hashes[subject], terms[subject],
                             run_reasons, evidence, True, EVALUATOR, None, None)
            for subject in sorted(terms)
        }  # fmt: skip

    evaluations, t = timed(proofs)
    lines = [LINE(t) for ts in terms.values() for t in ts]
    if check:
        for ts in terms.values():
            for tr in ts:
                assert canonical_bytes(tr.model_dump(mode="json")) == FAST(
                    tr.model_dump(mode="json")
                )
    sha = sha_time(lines)
    del lines
    table.add("proof", t, sha)
    decisions = {s: (e.proof.decision, e.proof.reason_codes[:3]) for s, e in evaluations.items()}
    print(f"decisions: {decisions}")
    results, t = timed(lambda: publish(rp, evaluations))
    table.add("publish", t, sha)
    size, t = timed(lambda: serialize(evaluations, results))
    table.add("serialize", t, sha)
    if check:
        for r in results.values():
            doc = r.model_dump(mode="json", by_alias=True)
            assert canonical_bytes(doc) == FAST(doc)
    print(f"derived files: {size / 2**20:,.1f} MiB; sha256 over the terminal lines: {sha:.2f} s")
    results.clear()
    evaluations.clear()


if __name__ == "__main__":
    main()
