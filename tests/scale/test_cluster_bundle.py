"""The coordinator is the single writer of evidence: a worker's bundle enters the run directory
only whole and only when every check passes (chain, protocol, cell, attempt, blob addresses,
environment); a refused bundle is written nowhere. An attempt lost with its worker is recorded
as begun and ended by the harness, HARNESS_INVALID with its cause, and the attempt policy
retries it exactly as it would a local attempt cut off mid-way.

No cluster here: the bundles are made as a worker makes them (a Journal in a scratch folder),
then tampered with. The real cluster is tests/scale/test_cluster_runtime.py.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.benchmarks.registry import workload_for
from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.environment.artifact import ExecutionEnvironment
from runner.evaluator.evidence.journal import EvidenceStore, read_journal
from runner.evaluator.evidence.records import (
    AttemptEnded,
    AttemptStarted,
    EnvironmentRecorded,
    GraderResult,
    HarnessError,
)
from runner.evaluator.protocol.matrix import Cell
from runner.evaluator.verdict.outcomes import attempt_status, group_attempts
from runner.runtime.attempt.api import journal_name
from runner.runtime.executor import MatrixRun
from runner.runtime.prepared import SpecSource, prepare
from runner.scale.cluster import task_key
from runner.scale.cluster_bundle import AttemptBundle, admit
from runner.scale.worker_host import check_address, parse_resources

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"


@pytest.fixture(scope="module")
def mrun_factory() -> Callable[[Path], MatrixRun]:
    prepared = prepare(SpecSource.read(SMOKE))
    workload = workload_for(prepared.spec, SMOKE)
    made: dict[str, MatrixRun] = {}

    def make(out: Path) -> MatrixRun:
        if "proto" not in made:
            made["proto"] = MatrixRun.create(prepared, out, "c0ffee", True, workload)
        p = made["proto"]
        run_dir = out / f"run-{len(list(out.iterdir()))}"
        run_dir.mkdir()
        (run_dir / "protocol.json").write_bytes((p.run_dir / "protocol.json").read_bytes())
        return MatrixRun(prepared, run_dir, p.rp, workload, p.launchers)

    return make


def _env() -> tuple[bytes, str]:
    env = ExecutionEnvironment.build("2026-12-01T00:00:00Z", "sha256:" + "1" * 64, [])
    return canonical_bytes(env.to_json()), env.execution_environment_hash


def make_bundle(
    mrun: MatrixRun, cell: Cell, attempt: int = 1, completed: bool = True
) -> AttemptBundle:
    """What a worker returns for a completed attempt: a real journal, its report blob."""
    slot = mrun.slots[cell.slot_id]
    ref = {"cell_id": cell.cell_id, "attempt": attempt}
    with tempfile.TemporaryDirectory() as d:
        store = EvidenceStore(Path(d))
        report = store.put_json_blob({"tests": "ok", "cell": cell.cell_id})
        name = journal_name(cell.cell_id, attempt)
        with store.journal(name) as j:
            j.append(
                AttemptStarted(
                    **ref,
                    slot_id=cell.slot_id,
                    subject_id=cell.subject_id,
                    subject_config_hash=cell.subject_config_hash,
                    fault_id=slot.schedule.fault_id,
                    kind=slot.schedule.kind,
                )
            )
            j.append(
                GraderResult(
                    **ref,
                    grader_id="swe-lite",
                    grader_version="1",
                    scorer_version="1",
                    completed=completed,
                    intended_effects=1,
                    committed_effects=1,
                    report=report,
                    shape_ok=True,
                )
            )
            j.append(
                AttemptEnded(
                    **ref, outcome="subject_finished", trigger_reached=False, wall_ns="1000"
                )
            )
        journal = (Path(d) / "journals" / f"{name}.jsonl").read_bytes()
        blobs = {report: store.get_blob(report)}
    env, env_hash = _env()
    return AttemptBundle(
        protocol_hash=mrun.rp.identities.protocol_hash,
        cell_id=cell.cell_id,
        attempt=attempt,
        worker_id="abc123",
        worker_address="tcp://127.0.0.1:1",
        pid=1,
        journal=journal,
        blobs=blobs,
        environment=env,
        environment_hash=env_hash,
        attempt_wall_ns=1000,
        finished_at_ns=1,
    )


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def baseline_cell(mrun: MatrixRun) -> Cell:
    return next(c for c in mrun.cells() if mrun.slots[c.slot_id].schedule.kind == "none")


def test_a_valid_bundle_is_written_whole_and_decides_the_cell(
    tmp_path: Path, mrun_factory: Callable[[Path], MatrixRun]
) -> None:
    mrun = mrun_factory(tmp_path)
    cell = baseline_cell(mrun)
    bundle = make_bundle(mrun, cell)
    seen: set[str] = set()
    got = admit(bundle, cell, 1, mrun, seen)
    assert got.journal.read_bytes() == bundle.journal
    assert [e.record.type for e in read_journal(got.journal)] == [
        "attempt_started",
        "grader_result",
        "attempt_ended",
    ]
    for address, data in bundle.blobs.items():
        assert mrun.store.get_blob(address) == data
    envs = [e.record for e in read_journal(mrun.run_dir / "journals" / "run.jsonl")]
    assert [type(r) for r in envs] == [EnvironmentRecorded]
    assert mrun.store.get_blob(envs[0].artifact) == bundle.environment  # type: ignore[union-attr]
    assert mrun.attempt_finished(cell, 1)
    # the same worker environment is recorded once; a second bundle of the same attempt is
    # refused (evidence is never overwritten) and changes nothing
    before = snapshot(mrun.run_dir)
    with pytest.raises(EvidenceError, match="never overwritten"):
        admit(bundle, cell, 1, mrun, seen)
    assert snapshot(mrun.run_dir) == before
    other = next(c for c in mrun.cells() if c.cell_id != cell.cell_id)
    admit(make_bundle(mrun, other), other, 1, mrun, seen)
    assert len(list(read_journal(mrun.run_dir / "journals" / "run.jsonl"))) == 1


def _replace_line(journal: bytes, n: int, old: bytes, new: bytes) -> bytes:
    lines = journal.split(b"\n")
    assert old in lines[n]
    lines[n] = lines[n].replace(old, new)
    return b"\n".join(lines)


def _tamper(kind: str, b: AttemptBundle, mrun: MatrixRun, cell: Cell) -> tuple[AttemptBundle, str]:
    other = next(c for c in mrun.cells() if c.cell_id != cell.cell_id and c.slot_id != cell.slot_id)
    ((report, data),) = b.blobs.items()
    if kind == "broken chain":  # the grade flipped; the next line's prev no longer matches
        j = _replace_line(b.journal, 1, b'"completed":true', b'"completed":false')
        return b.model_copy(update={"journal": j}), "chain broken"
    if kind == "edited last line":  # not canonical any more
        j = _replace_line(b.journal, 2, b'"wall_ns":"1000"', b'"wall_ns": "1000"')
        return b.model_copy(update={"journal": j}), "canonical"
    if kind == "wrong cell":  # a real journal of another cell, sent as this one
        return make_bundle(mrun, other).model_copy(
            update={"cell_id": cell.cell_id}
        ), "record of cell"
    if kind == "asked another cell":
        return b, "asked for cell"
    if kind == "wrong attempt":
        return make_bundle(mrun, cell, attempt=2).model_copy(update={"attempt": 1}), "attempt 2"
    if kind == "wrong protocol":
        return b.model_copy(update={"protocol_hash": "sha256:" + "e" * 64}), "protocol"
    if kind == "another slot":  # every record names this cell, but it started another slot
        j = _replace_line(b.journal, 0, cell.slot_id.encode(), other.slot_id.encode())
        # re-chain so that only the slot is wrong
        lines = j.split(b"\n")[:-1]
        from runner.evaluator.core.canonical import parse_json, sha256_digest

        prev = None
        out = []
        for line in lines:
            env = parse_json(line)
            env["prev"] = prev
            body = canonical_bytes(env)
            out.append(body)
            prev = sha256_digest(body)
        return b.model_copy(update={"journal": b"\n".join(out) + b"\n"}), "attempt_started"
    if kind == "blob not matching its address":
        return b.model_copy(update={"blobs": {report: data + b" "}}), "does not match its address"
    if kind == "referenced blob missing":
        return b.model_copy(update={"blobs": {}}), "missing"
    if kind == "unreferenced blob":
        extra = b"smuggled"
        blobs = {report: data, "sha256:" + hashlib.sha256(extra).hexdigest(): extra}
        return b.model_copy(update={"blobs": blobs}), "no record references"
    if kind == "environment not matching its hash":
        env = b.environment.replace(b"2026-12-01", b"2026-12-02")
        return b.model_copy(update={"environment": env}), "environment"
    raise AssertionError(kind)


TAMPERING = [
    "broken chain",
    "edited last line",
    "wrong cell",
    "asked another cell",
    "wrong attempt",
    "wrong protocol",
    "another slot",
    "blob not matching its address",
    "referenced blob missing",
    "unreferenced blob",
    "environment not matching its hash",
]


@pytest.mark.parametrize("kind", TAMPERING)
def test_a_tampered_bundle_is_refused_and_written_nowhere(
    kind: str, tmp_path: Path, mrun_factory: Callable[[Path], MatrixRun]
) -> None:
    mrun = mrun_factory(tmp_path)
    cell = baseline_cell(mrun)
    bad, why = _tamper(kind, make_bundle(mrun, cell), mrun, cell)
    target = cell
    if kind == "asked another cell":
        target = next(c for c in mrun.cells() if c.cell_id != cell.cell_id)
    before = snapshot(mrun.run_dir)
    with pytest.raises(EvidenceError, match=why) as exc:
        admit(bad, target, 1, mrun, set())
    assert "abc123" in str(exc.value) and target.cell_id in str(exc.value)
    assert snapshot(mrun.run_dir) == before  # no journal, no blob, no environment record
    assert not any(p.name.endswith(".incoming") for p in mrun.run_dir.rglob("*"))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_flipped_byte_before_the_last_line_is_refused(
    data: st.DataObject,
    tmp_path_factory: pytest.TempPathFactory,
    mrun_factory: Callable[[Path], MatrixRun],
) -> None:
    """Each line commits to the one before it: a change anywhere but in the last line breaks
    the chain (or the line itself). The last line is bound by the evaluator's own reading."""
    mrun = mrun_factory(tmp_path_factory.mktemp("flip"))
    cell = baseline_cell(mrun)
    b = make_bundle(mrun, cell)
    last = b.journal.rstrip(b"\n").rfind(b"\n")
    pos = data.draw(st.integers(0, last))
    new = data.draw(st.integers(0, 255).filter(lambda v: v != b.journal[pos]))
    j = bytearray(b.journal)
    j[pos] = new
    before = snapshot(mrun.run_dir)
    with pytest.raises(EvidenceError):
        admit(b.model_copy(update={"journal": bytes(j)}), cell, 1, mrun, set())
    assert snapshot(mrun.run_dir) == before


def test_a_lost_attempt_is_harness_invalid_with_its_cause_and_is_retried(
    tmp_path: Path, mrun_factory: Callable[[Path], MatrixRun]
) -> None:
    mrun = mrun_factory(tmp_path)
    cell = baseline_cell(mrun)
    path = mrun.record_lost_attempt(cell, 1, "worker_lost", "KilledWorker: died (worker w1)", 5)
    entries = [(path.stem, e.seq, e.record) for e in read_journal(path)]
    assert [r.type for _, _, r in entries] == ["attempt_started", "harness_error", "attempt_ended"]
    assert isinstance(entries[1][2], HarnessError) and "KilledWorker" in entries[1][2].message
    slot = mrun.slots[cell.slot_id]
    status, reasons = attempt_status(
        group_attempts(entries)[cell.cell_id][1],
        slot.schedule.kind,
        slot.schedule.parameters,
        None,
        "1",
    )
    assert status.value == "HARNESS_INVALID" and "worker_lost" in reasons
    assert not mrun.attempt_finished(cell, 1)  # the policy (retry_on HARNESS_INVALID) retries
    state = next(s for s in mrun.cell_states() if s.cell.cell_id == cell.cell_id)
    assert (state.attempts_done, state.finished) == (1, False)
    admit(make_bundle(mrun, cell, attempt=2), cell, 2, mrun, set())
    assert mrun.attempt_finished(cell, 2)
    with pytest.raises(EvidenceError, match="already recorded"):
        mrun.record_lost_attempt(cell, 2, "worker_lost", "again", 0)


def test_a_worker_on_another_protocol_refuses(tmp_path: Path) -> None:
    prepared = prepare(SpecSource.read(SMOKE), freeze=False)
    workload = workload_for(prepared.spec, SMOKE)
    with pytest.raises(InputError, match="resolves the spec to protocol"):
        MatrixRun.for_worker(prepared, tmp_path, "abc123", workload, "sha256:" + "0" * 64)
    assert not any(tmp_path.rglob("*.jsonl"))


def test_options_parse_or_name_the_option() -> None:
    assert parse_resources("NETNS=1") == {"NETNS": 1.0}
    assert parse_resources("NETNS=1,GPU=2") == {"NETNS": 1.0, "GPU": 2.0}
    assert parse_resources(None) == {}
    for bad in ("NETNS", "NETNS=0", "NETNS=x", "1A=1", "A=1,A=2"):
        with pytest.raises(InputError) as exc:
            parse_resources(bad)
        assert exc.value.key == "--resources"
    assert check_address("tcp://127.0.0.1:8786", "--cluster")
    for bad in ("127.0.0.1:8786", "tcp://host", "http://h:1", "tcp://:1"):
        with pytest.raises(InputError):
            check_address(bad, "--cluster")


def test_task_keys_are_distinct_per_run_cell_attempt_and_resubmission(
    tmp_path: Path, mrun_factory: Callable[[Path], MatrixRun]
) -> None:
    mrun = mrun_factory(tmp_path)
    cells = mrun.cells()
    keys = {
        task_key(run, c, n, r)
        for run in ("aaaaaa", "bbbbbb")
        for c in cells
        for n in (1, 2)
        for r in (0, 1)
    }
    assert len(keys) == 2 * len(cells) * 2 * 2
