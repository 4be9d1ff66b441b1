"""Evaluator benchmark (run on demand; not a test): DESIGN §4-§6 at 1,000,000 cells.

    cd /work/main && .venv/bin/python tests/perf/bench_evaluator.py [--cells 1000000]
        [--evidence full|terminal] [--ineligible 1] [--check]
    cd /work/main && .venv/bin/python tests/perf/bench_evaluator.py --from-journals
        [--cells 1000000] [--tmp DIR] [--keep DIR | --run-dir DIR]

Generates a spec of TASKS tasks x (baseline + 4 fault kinds) x 1 seed x 4 subjects (TASKS =
cells / 20; 50,000 tasks = 1,000,000 cells) and, per cell, one attempt with the records a real
run writes (started, trigger, lifecycle, actuator receipt, witness observations, tool calls,
grade, ended: 14 records for a faulted cell, 4 for a baseline one).

`--evidence terminal` (default above 100,000 cells) measures the issue's target, the evaluation
of the terminal records (DESIGN §9: terminal records -> eligibility proof -> publication):

- upstream (in this process, per cell, streamed): synthesize the attempt's records, derive the
  cell's TerminalRecord with the evaluator's `group_attempts` + `terminal_record` (`terminals`),
  and write its canonical line to an input file. The evidence-root leaves of the journal lines
  (`journal.line_leaf`) are measured over the first 100,000 cells and scaled (marked `~`).
- in a fresh child process (so its peak memory is its own), the measured evaluation:
  `protocol`: read protocol.json (`read_protocol`: parse, canonical-form check) and re-derive its
  identities (`consistency_problems`); `proof`: per subject, stream the input lines through
  `TerminalRecord.model_validate_json` into `eligibility.decide_subject` (coverage, strata,
  reasons, terminal_records_hash, sealed proof); `publish+write`: `results.render_results`
  (scorecard + cell-scores.jsonl, or incomplete-evidence report + cell-history.jsonl, markdown,
  comparison) and `results.write_results` (files on disk); `evaluate`: the three together, the
  issue's figure. `ratio` is a stage's wall time over plain hashlib.sha256 over the input's bytes
  (the 1,000,000 canonical terminal lines, line by line).

`--evidence full` (default up to 100,000 cells) holds every record in memory (`LoadedEvidence`'s
in-memory form) and runs the real `evaluate_run` + `render_results` (what `results.derive` does
after reading the journals, without reading them).

`--from-journals` measures what `bench evaluate` does, end to end: it writes a run directory
(protocol.json and one journal per attempt, `<cell id prefix>-a1.jsonl`, hash-chained lines as
the journal writer writes them, with 2 worker processes), then, each in a fresh process:
`sha256`: plain hashlib.sha256 over every journal line (read from the same files; this pass also
warms the page cache, so both passes read from memory); `evaluate`: `results.evaluate_into`
(read and check every journal line, evidence root, terminal records, proofs, publication, every
result file written as it is made; the journals read by 2 worker processes), its wall time, the
peak RSS of its main process (`evaluate` row) and of its largest worker, its CPU time (main and
workers, user and system), and its ratio to the `sha256` pass. `--keep DIR` keeps the written
run directory; `--from-journals --run-dir DIR` measures an existing one (writing a million
cells' journals takes long on a shared machine; the protocol binds the fixed EVALUATOR digest,
so a kept directory stays valid across evaluator changes). Figures (README, Performance): at a
million cells 143-148 s wall and 145-148 s CPU (main + workers) under a load of 2.6-3.4 on 2
cores, main VmHWM 819 MiB; before the templates and memos of issue 13's last part, 197.5 s and
212.7 s CPU on the same directory.

The stages run with the cyclic GC paused, as `results.derive` runs them. (One script for the
three modes, which share the synthesis: hence its length.) Peak memory is VmHWM (the process
image's high-water mark, `rss_mib`). `--check` re-canonicalizes every hashed document with the
reference RFC 8785 encoder in the full mode, and in the terminal mode checks the first 20,000
lines of the input and of every written row file, and every written JSON document, the same way.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import multiprocessing
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from runner.evaluator.protocol.faultkinds import LOST_RESPONSE, NO_FAULT

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.evaluator.core.canonical import (  # noqa: E402
    canonical_bytes,
    fast_canonical_bytes,
    sha256_digest,
)
from runner.evaluator.core.inputs import project_root  # noqa: E402
from runner.evaluator.evidence.hashing import evidence_root  # noqa: E402
from runner.evaluator.evidence.journal import line_leaf  # noqa: E402
from runner.evaluator.evidence.loading import LoadedEvidence  # noqa: E402
from runner.evaluator.evidence.records import (  # noqa: E402
    ActuatorReceipt,
    AttemptEnded,
    AttemptStarted,
    GraderResult,
    LifecycleTransition,
    ToolCallCount,
    TriggerReached,
    WitnessObservation,
)
from runner.evaluator.protocol.identities import compute  # noqa: E402
from runner.evaluator.protocol.matrix import Slot, resolve  # noqa: E402
from runner.evaluator.protocol.runfile import (  # noqa: E402
    RunProtocol,
    consistency_problems,
    read_protocol,
    write_protocol,
)
from runner.evaluator.protocol.specload import load_spec  # noqa: E402
from runner.evaluator.protocol.witness import load_contracts  # noqa: E402
from runner.evaluator.publish.results import (  # noqa: E402
    evaluate_into,
    paused_gc,
    render_results,
    write_results,
)
from runner.evaluator.verdict.eligibility import _cell_id, decide_subject, evaluate_run  # noqa: E402
from runner.evaluator.verdict.outcomes import (  # noqa: E402
    TerminalRecord,
    group_attempts,
    terminal_line,
    terminal_record,
)
from tests.evidence.synth import (  # noqa: E402
    ACTUATOR_COMPONENT,
    GOOD,
    NOOP,
    PHASES,
    frozen_record,
)

EVALUATOR = "sha256:" + "0" * 64
FAULTS = [
    ("kill", "sigkill_mid_tool_call", "submit_patch", "effect_done"),
    ("lose", "lost_response", "submit_patch", "effect_done"),
    ("part", "network_partition", "submit_patch", "received"),
    ("restart", "sandbox_restart", "write_file", "response_sent"),
]
LEAF_SAMPLE = 100_000  # cells whose journal-line leaves are hashed in terminal mode
AT_NS = "1700000000000000000"


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
    reached = kind != NO_FAULT
    if reached:
        fid = slot.schedule.fault_id
        trig = slot.schedule.trigger or {}
        table = (NOOP if noop else GOOD)[kind]

        def observe(phase: str) -> None:  # each observation where the runtime writes it
            for oname, obs in table.items():
                if PHASES[kind][oname] == phase:
                    recs.append(WitnessObservation(**ref, fault_id=fid, kind=kind, name=oname,
                                                   observation=obs))  # fmt: skip

        for state in ("scheduled", "armed"):
            recs.append(LifecycleTransition(**ref, fault_id=fid, state=state))
        recs.append(TriggerReached(**ref, fault_id=fid, call_id="call-3", tool=trig["tool"],
                                   ordinal=trig["ordinal"], phase=trig["phase"]))  # fmt: skip
        observe("before_injection")
        recs.append(ActuatorReceipt(**ref, fault_id=fid, kind=kind, actuator="bench",
                                    component=ACTUATOR_COMPONENT[kind], applied=True))  # fmt: skip
        recs.append(LifecycleTransition(**ref, fault_id=fid, state="injected"))
        observe("after_injection")
        recs.append(LifecycleTransition(**ref, fault_id=fid, state="witnessed"))
        recs.append(LifecycleTransition(**ref, fault_id=fid, state="recovered"))
        observe("after_release")
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
        """Every cell, per subject in cell-id order (the order the evaluator derives them in)."""
        index = {s.slot_id: i for i, s in enumerate(rp.slots)}
        for subject, shash in sorted(rp.identities.subject_config_hashes.items()):
            rows = sorted((_cell_id(s.slot_id, shash), s) for s in rp.slots)
            for cid, slot in rows:
                yield subject, shash, cid, slot, index[slot.slot_id]

    def records(self, subject: str, shash: str, cell: str, slot: Slot, i: int) -> list[Entry]:
        # An ineligible subject: every 97th lost_response cell's actuator was a no-op.
        noop = subject in self.ineligible and slot.schedule.kind == LOST_RESPONSE and i % 97 == 0
        return attempt_records(subject, shash, cell, slot, i, noop)


# ---------------------------------------------------------------------------------- measuring


def rss_mib() -> float:
    """Peak RSS of this process image. VmHWM, not ru_maxrss: Linux carries ru_maxrss across
    exec, so a child started from a big parent would report the parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


class Table:
    def __init__(self, cells: int) -> None:
        self.cells = cells
        self.rows: list[tuple[str, float, float, str, bool]] = []

    def add(
        self, stage: str, wall: float, mib: float, sha: float | None = None, approx: bool = False
    ) -> None:
        ratio = f"{wall / sha:,.0f}x" if sha else "-"
        self.rows.append((stage, wall, mib, ratio, approx))

    def print(self) -> None:
        print(f"{'stage':<14} {'cells':>10} {'wall s':>9} {'peak MiB':>9} {'ratio/sha256':>12}")
        for stage, wall, mib, ratio, approx in self.rows:
            w = f"{'~' if approx else ''}{wall:.2f}"
            print(f"{stage:<14} {self.cells:>10,} {w:>9} {mib:>9.0f} {ratio:>12}")


def envelope(seq: int, record: Any) -> bytes:
    """A journal line as the journal writes it (prev is a position: a fixed digest will do)."""
    body = record.model_dump(mode="json")
    prev = None if seq == 1 else "sha256:" + "ab" * 32
    return fast_canonical_bytes({"seq": seq, "prev": prev, "at_ns": AT_NS, "record": body})


def run_reasons(rp: RunProtocol) -> list[str]:
    return ["protocol_inconsistent"] if consistency_problems(rp) else []


# ----------------------------------------------------------------------------------- full mode


def run_full(b: Bench, rp: RunProtocol, table: Table, check: bool) -> None:
    def synth() -> list[Entry]:
        out: list[Entry] = []
        for c in b.cells(rp):
            out.extend(b.records(*c))
        return out

    entries, t = timed(synth)
    table.add("synth", t, rss_mib())
    journal_lines = [envelope(n, r) for _, n, r in entries]
    mib = sum(map(len, journal_lines)) / 2**20
    print(f"{len(entries):,} records, {mib:,.0f} MiB of journal lines")

    def leaves() -> LoadedEvidence:
        return LoadedEvidence(entries, evidence_root([line_leaf(x) for x in journal_lines]), [])

    evidence, t = timed(leaves)
    table.add("leaves+root", t, rss_mib(), sha_over(journal_lines))
    if check:
        for line in journal_lines:
            assert canonical_bytes(json.loads(line)) == line
    journal_lines.clear()

    def derive_equiv() -> dict[str, bytes]:
        evaluations = evaluate_run(rp, evidence, EVALUATOR)
        return render_results(rp, evaluations, ["protocol.json"])[1]

    files, t = timed(derive_equiv)
    size = sum(len(v) for v in files.values())
    table.add("evaluate", t, rss_mib())
    print(f"derived files: {size / 2**20:,.1f} MiB")
    decisions(files)
    if check:
        for rel, data in files.items():
            if rel.endswith(".json"):
                assert canonical_bytes(json.loads(data)) + b"\n" == data, rel
            elif rel.endswith(".jsonl"):
                for line in data.splitlines():
                    assert canonical_bytes(json.loads(line)) == line, rel


def sha_over(lines: list[bytes]) -> float:
    t = time.perf_counter()
    for x in lines:
        hashlib.sha256(x).digest()
    return time.perf_counter() - t


def decisions(files: dict[str, bytes]) -> None:
    out = {}
    for rel, data in sorted(files.items()):
        if rel.endswith("/proof.json"):
            p = json.loads(data)
            out[p["subject_id"]] = (p["decision"], p["reason_codes"][:3])
    print(f"decisions: {out}")


# ------------------------------------------------------------------------------- terminal mode


def run_terminal(b: Bench, rp: RunProtocol, table: Table, check: bool, tmp: Path) -> None:
    spec = rp.spec()
    contracts = rp.contract_map()
    run_dir = tmp / "run"
    write_protocol(run_dir, rp)
    source = tmp / "terminal-records.jsonl"
    t_synth = t_terms = t_leaves = 0.0
    leaves: list[str] = []
    sample_bytes: list[bytes] = []
    counts: dict[str, int] = {}
    with open(source, "wb") as out:
        for k, (subject, shash, cid, slot, i) in enumerate(b.cells(rp)):
            t0 = time.perf_counter()
            recs = b.records(subject, shash, cid, slot, i)
            t1 = time.perf_counter()
            tr = terminal_record(
                cid, slot.slot_id, subject, slot.stratum, slot.schedule.kind,
                slot.schedule.parameters, group_attempts(recs).get(cid), spec.attempts,
                contracts.get(slot.schedule.kind), spec.scoring.scorer_version,
            )  # fmt: skip
            line = terminal_line(tr)
            t2 = time.perf_counter()
            t_synth += t1 - t0
            t_terms += t2 - t1
            out.write(line + b"\n")
            counts[subject] = counts.get(subject, 0) + 1
            if k < LEAF_SAMPLE:
                env = [envelope(n, r) for _, n, r in recs]
                t3 = time.perf_counter()
                leaves.extend(line_leaf(x) for x in env)
                t_leaves += time.perf_counter() - t3
                sample_bytes.extend(env)
    scale = table.cells / min(LEAF_SAMPLE, table.cells)
    t3 = time.perf_counter()
    root = evidence_root(leaves)
    t_leaves += time.perf_counter() - t3
    table.add("synth", t_synth, rss_mib())
    table.add("terminals", t_terms, rss_mib())
    table.add(
        "leaves+root", t_leaves * scale, rss_mib(), sha_over(sample_bytes) * scale, scale != 1
    )
    mib = source.stat().st_size / 2**20
    print(f"leaves: {len(leaves):,} journal lines of {min(LEAF_SAMPLE, table.cells):,} cells, "
          f"x{scale:.0f}; input: {mib:,.0f} MiB of terminal lines")  # fmt: skip
    del leaves, sample_bytes
    gc.collect()
    cmd = [sys.executable, __file__, "--child", str(run_dir), str(source), root,
           json.dumps(counts)] + (["--check"] if check else [])  # fmt: skip
    child = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
    for stage, wall, mib, sha in child["rows"]:
        table.add(stage, wall, mib, sha)
    print(f"derived files: {child['size'] / 2**20:,.1f} MiB")
    print(f"decisions: {child['decisions']}")


def child(run_dir: Path, source: Path, root: str, counts: dict[str, int], check: bool) -> None:
    """The measured evaluation, alone in its process."""
    rows: list[tuple[str, float, float, float | None]] = []
    with paused_gc():
        t0 = time.perf_counter()
        rp = read_protocol(run_dir)
        reasons = run_reasons(rp)
        rows.append(("protocol", time.perf_counter() - t0, rss_mib(), None))
        t1 = time.perf_counter()
        evaluations = {}
        with open(source, "rb") as fh:
            for subject, shash in sorted(rp.identities.subject_config_hashes.items()):
                stream = (
                    TerminalRecord.model_validate_json(fh.readline())
                    for _ in range(counts[subject])
                )
                evaluations[subject] = decide_subject(
                    rp, subject, shash, stream, reasons, root, True, EVALUATOR, None, None
                )
        t2 = time.perf_counter()
        _, files = render_results(rp, evaluations, ["journals/x.jsonl", "protocol.json"])
        write_results(run_dir, files)
        t3 = time.perf_counter()
        size = sum(len(v) for v in files.values())
        out_decisions = {
            s: (e.proof.decision, e.proof.reason_codes[:3]) for s, e in evaluations.items()
        }
        del evaluations, files
    sha = sha_file(source)
    if check:  # the input and every written row file: first 20,000 lines of each
        for path in [source, *sorted((run_dir / "results").rglob("*.jsonl"))]:
            with open(path, "rb") as fh:
                for _, raw in zip(range(20_000), fh, strict=False):
                    assert canonical_bytes(json.loads(raw)) + b"\n" == raw, path
        for path in sorted((run_dir / "results").rglob("*.json")):
            assert canonical_bytes(json.loads(path.read_bytes())) + b"\n" == path.read_bytes()
    rows.append(("proof", t2 - t1, rss_mib(), sha))
    rows.append(("publish+write", t3 - t2, rss_mib(), sha))
    rows.append(("evaluate", t3 - t0, rss_mib(), sha))
    print(json.dumps({"rows": rows, "size": size, "decisions": out_decisions}))


def sha_file(path: Path) -> float:
    with open(path, "rb") as fh:
        lines = fh.readlines()
    return sha_over(lines)


# ------------------------------------------------------------------------ from-journals mode


def _write_journals(args: tuple[str, str, int, int, int]) -> tuple[int, int]:
    """Worker: the journals of every `step`-th cell from `start` (chained lines, no fsync)."""
    spec_path, run_dir, ineligible, start, step = args
    b = Bench.__new__(Bench)
    b.subjects, b.spec_path = 4, Path(spec_path)
    b.ineligible = {f"s{b.subjects - 1 - n}" for n in range(ineligible)}
    rp = read_protocol(Path(run_dir))
    journals = Path(run_dir) / "journals"
    lines = size = 0
    for k, cell in enumerate(b.cells(rp)):
        if k % step != start:
            continue
        out = bytearray()
        prev: str | None = None
        recs = b.records(*cell)
        for _, seq, rec in recs:
            body = rec.model_dump(mode="json")
            line = fast_canonical_bytes({"seq": seq, "prev": prev, "at_ns": AT_NS, "record": body})
            prev = sha256_digest(line)
            out += line + b"\n"
            lines += 1
        (journals / f"{recs[0][0]}.jsonl").write_bytes(out)
        size += len(out)
    return lines, size


def run_from_journals(b: Bench, rp: RunProtocol, table: Table, tmp: Path, ineligible: int) -> None:
    run_dir = tmp / "run"
    write_protocol(run_dir, rp)
    (run_dir / "journals").mkdir()
    (run_dir / "blobs" / "sha256").mkdir(parents=True)
    t = time.perf_counter()
    jobs = [(str(b.spec_path), str(run_dir), ineligible, k, 2) for k in range(2)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        done = pool.map(_write_journals, jobs)
    lines, size = sum(d[0] for d in done), sum(d[1] for d in done)
    table.add("write journals", time.perf_counter() - t, rss_mib())
    print(f"journals: {lines:,} lines, {size / 2**20:,.0f} MiB in {table.cells:,} files")
    sha = _child_json(["--sha-journals", str(run_dir)])
    table.add("sha256", sha["wall"], sha["mib"])
    evaluate_existing(run_dir, table, sha)


def evaluate_existing(run_dir: Path, table: Table, sha: dict[str, Any] | None = None) -> None:
    ev = _child_json(["--evaluate-journals", str(run_dir)])
    for stage, wall, mib in ev["rows"]:
        table.add(stage, wall, mib, sha["wall"] if sha and stage == "evaluate" else None)
    print(f"derived files: {ev['size'] / 2**20:,.1f} MiB")
    print(f"decisions: {ev['decisions']}")
    c = ev["cpu"]
    print(
        f"cpu: main {c['main_user_s']:.1f} s user + {c['main_sys_s']:.1f} s sys, workers "
        f"{c['workers_user_s']:.1f} s user + {c['workers_sys_s']:.1f} s sys; peak RSS: main "
        f"(evaluate row), largest worker {c['workers_peak_rss_mib']:.0f} MiB"
    )


def _cells_of(run_dir: Path) -> int:
    rp = read_protocol(run_dir)
    return len(rp.slots) * len(rp.identities.subject_config_hashes)


def _child_json(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, *args]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)  # type: ignore[no-any-return]


def sha_journals(run_dir: Path) -> None:
    t = time.perf_counter()
    for path in sorted((run_dir / "journals").iterdir()):
        with open(path, "rb") as fh:
            for line in fh:
                hashlib.sha256(line).digest()
    print(json.dumps({"wall": time.perf_counter() - t, "mib": rss_mib()}))


def evaluate_journals(run_dir: Path) -> None:
    """`bench evaluate` without the CLI: `results.evaluate_into` (derive from the journals,
    results written as they are made; the journals read by 2 worker processes)."""
    t0 = time.perf_counter()
    _, results = evaluate_into(run_dir, EVALUATOR)
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows = [("evaluate", wall, rss_mib())]
    decided = {
        s: (r.evaluation.proof.decision, r.evaluation.proof.reason_codes[:3])
        for s, r in results.items()
    }
    size = sum(p.stat().st_size for p in (run_dir / "results").rglob("*") if p.is_file())
    cpu = {
        "main_user_s": me.ru_utime, "main_sys_s": me.ru_stime,
        "workers_user_s": kids.ru_utime, "workers_sys_s": kids.ru_stime,
        "workers_peak_rss_mib": kids.ru_maxrss / 1024,
    }  # fmt: skip
    print(json.dumps({"rows": rows, "size": size, "decisions": decided, "cpu": cpu}))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--sha-journals":
        sha_journals(Path(sys.argv[2]))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--evaluate-journals":
        evaluate_journals(Path(sys.argv[2]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run_dir, source, root, counts = sys.argv[2:6]
        child(Path(run_dir), Path(source), root, json.loads(counts), "--check" in sys.argv)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=1_000_000)
    ap.add_argument("--evidence", choices=["full", "terminal"], default=None)
    ap.add_argument("--ineligible", type=int, default=1, help="subjects with a no-op actuator")
    ap.add_argument("--check", action="store_true", help="compare bytes with the RFC 8785 ref")
    ap.add_argument("--from-journals", action="store_true", help="bench evaluate, end to end")
    ap.add_argument("--tmp", default="/var/tmp", help="where the run directory is written")
    ap.add_argument(
        "--run-dir", type=Path, default=None,
        help="with --from-journals: evaluate this run directory (written by an earlier run of "
        "this script with --keep) instead of writing one",
    )  # fmt: skip
    ap.add_argument("--keep", type=Path, default=None, help="keep the written run directory here")
    args = ap.parse_args()
    if args.from_journals and args.run_dir is not None:
        table = Table(_cells_of(args.run_dir))
        sha = _child_json(["--sha-journals", str(args.run_dir)])
        table.add("sha256", sha["wall"], sha["mib"])
        evaluate_existing(args.run_dir, table, sha)
        table.print()
        return
    mode = args.evidence or ("full" if args.cells <= 100_000 else "terminal")
    if args.from_journals:
        mode = "journals"

    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        b = Bench(args.cells, args.ineligible, tmp)
        rp, t_resolve = timed(b.resolve)
        n_cells = len(rp.slots) * len(rp.identities.subject_config_hashes)
        table = Table(n_cells)
        table.add("resolve", t_resolve, rss_mib())
        print(f"{n_cells:,} cells ({b.tasks:,} tasks x 5 x 1 seed x {b.subjects} subjects), "
              f"evidence mode: {mode}, ineligible subjects: {sorted(b.ineligible)}")  # fmt: skip
        gc.collect()
        with paused_gc():
            if mode == "journals":
                run_from_journals(b, rp, table, tmp, args.ineligible)
                if args.keep is not None:
                    (tmp / "run").rename(args.keep)
            elif mode == "full":
                run_full(b, rp, table, args.check)
            else:
                run_terminal(b, rp, table, args.check, tmp)
    table.print()


if __name__ == "__main__":
    main()
