"""The fast paths of evaluating from journals decide and write exactly what the reference does:
journals read by two processes (terminals.WORKERS), results written as a stream
(results.evaluate_into), each journal line accepted by the fast check only when the reference
check accepts it (journal._fast_line), and protocol.json parsed slot by slot
(runfile.parse_protocol). Byte for byte, and the same first error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runner.evaluator.verdict.terminals as terminals
from runner.evaluator.core.canonical import canonical_bytes, fast_canonical_bytes, sha256_digest
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence import journal as J
from runner.evaluator.evidence.hashing import evidence_root
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.protocol.runfile import PROTOCOL_FILE, RunProtocol, parse_protocol
from runner.evaluator.publish.results import RESULTS, derive, evaluate_into, render_results
from runner.evaluator.verdict.eligibility import evaluate_run
from tests.evidence.synth import Run
from tests.evidence.test_vectors import FIXED_EVALUATOR

OUTCOMES = ["completed", "failed", None, "noop", "pre_trigger", "harness", "duplicate", "mismatch"]


def _run(run_dir: Path) -> Run:
    """Subject a: every kind of outcome (retries, missing cells); b and c: all completed."""
    r = Run(run_dir, evaluator=FIXED_EVALUATOR, fixed_clock=True)
    for i, (cell, slot) in enumerate(r.cells("a")):
        o = OUTCOMES[i % len(OUTCOMES)]
        if o is not None:
            r.write_attempt("a", cell, slot, 1, o)
        if o in ("noop", "harness"):
            r.write_attempt("a", cell, slot, 2, "completed")
    r.fill("b", lambda i, s: "completed")
    return r


def _held_files(run_dir: Path, rp: RunProtocol) -> dict[str, bytes]:
    """The reference: every record held in memory, decided and rendered in this process."""
    store = EvidenceStore(run_dir)
    entries = [(j, e.seq, e.record) for j, e in store.entries()]
    root = evidence_root(e.leaf for _, e in store.entries())
    evaluations = evaluate_run(rp, LoadedEvidence(entries, root, []), FIXED_EVALUATOR)
    artifacts = [f"journals/{p.name}" for p in store.journal_paths()] + [PROTOCOL_FILE]
    return render_results(rp, evaluations, artifacts, run_dir=run_dir)[1]


def _on_disk(run_dir: Path) -> dict[str, bytes]:
    results = run_dir / RESULTS
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in results.rglob("*") if p.is_file()}


@pytest.fixture
def parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(terminals, "PARALLEL_FROM", 1)  # the synthetic run has ~60 journals
    monkeypatch.setattr(terminals, "WORKER_SPILL_BYTES", 96)  # workers spill their leaves


def test_parallel_and_streamed_results_are_the_held_ones_byte_for_byte(
    tmp_path: Path, parallel: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = _run(tmp_path / "run")
    held = _held_files(r.run_dir, r.protocol)
    assert any(rel.endswith("scorecard.json") for rel in held)  # both kinds of result
    assert any(rel.endswith("incomplete-evidence.json") for rel in held)
    forked: list[int] = []
    real = terminals.TerminalSpill._derive_parallel

    def spy(self: terminals.TerminalSpill, *args: Any) -> None:
        forked.append(1)
        real(self, *args)

    monkeypatch.setattr(terminals.TerminalSpill, "_derive_parallel", spy)
    _, res, files = derive(r.run_dir, FIXED_EVALUATOR)  # two workers
    assert forked and files == held
    monkeypatch.setattr(terminals, "PARALLEL_FROM", 10**9)
    assert derive(r.run_dir, FIXED_EVALUATOR)[2] == held  # one process
    monkeypatch.setattr(terminals, "PARALLEL_FROM", 1)
    _, streamed = evaluate_into(r.run_dir, FIXED_EVALUATOR)
    assert _on_disk(r.run_dir) == held
    assert [p.name for p in r.run_dir.iterdir() if p.name.startswith(".")] == []
    for s, result in streamed.items():
        assert result.evaluation.proof == res[s].evaluation.proof
        assert result.scorecard == res[s].scorecard and result.report == res[s].report
        assert not result.evaluation.held  # its lines are on disk, not in memory
        with pytest.raises(RuntimeError):
            result.evaluation.terminal_records  # noqa: B018


def _corrupt(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"attempt":1', b'"attempt":1 ', 1)  # not canonical
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("which", ["early", "late", "both"])
def test_the_first_error_in_journal_order_is_raised_whatever_the_workers(
    tmp_path: Path, parallel: None, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    r = _run(tmp_path / "run")
    paths = [p for p in EvidenceStore(r.run_dir).journal_paths() if p.stem[0] in "0123456789abcdef"]
    early = next(p for p in paths if p.name < "80")  # read by the first worker
    late = next(p for p in reversed(paths) if p.name >= "80")  # by the second
    for p in {"early": [early], "late": [late], "both": [early, late]}[which]:
        _corrupt(p)
    first = early if which != "late" else late
    with pytest.raises(EvidenceError) as two:
        derive(r.run_dir, FIXED_EVALUATOR)
    monkeypatch.setattr(terminals, "PARALLEL_FROM", 10**9)
    with pytest.raises(EvidenceError) as one:
        derive(r.run_dir, FIXED_EVALUATOR)
    assert str(two.value) == str(one.value)
    assert f"{first.name}: line 2: line is not in canonical form" in str(two.value)


def test_a_failed_streamed_evaluation_leaves_the_old_results(
    tmp_path: Path, parallel: None
) -> None:
    r = _run(tmp_path / "run")
    evaluate_into(r.run_dir, FIXED_EVALUATOR)
    before = _on_disk(r.run_dir)
    _corrupt(EvidenceStore(r.run_dir).journal_paths()[-1])
    with pytest.raises(EvidenceError):
        evaluate_into(r.run_dir, FIXED_EVALUATOR)
    assert _on_disk(r.run_dir) == before
    assert [p.name for p in r.run_dir.iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------------- one journal line


def _lines(run_dir: Path) -> list[bytes]:
    out: list[bytes] = []
    for p in EvidenceStore(run_dir).journal_paths():
        out += p.read_bytes().split(b"\n")[:-1]
    return out


@pytest.fixture(scope="module")
def real_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    return _lines(_run(tmp_path_factory.mktemp("lines") / "run").run_dir)


def _reference(line: bytes, seq: int, prev: str | None) -> tuple[str, Any, bytes] | None:
    try:
        p, at_ns, record, leaf = J._checked_line(line, seq, prev, "x")
    except EvidenceError:
        return None
    assert p == prev
    return at_ns, record, leaf


def _fast(line: bytes, seq: int, prev: str | None) -> tuple[str, Any, bytes] | None:
    member = b"null" if prev is None else b'"' + prev.encode() + b'"'
    return J._fast_line(line, seq, member)


def _position(line: bytes) -> tuple[int, str | None]:
    env = json.loads(line)
    return env["seq"], env["prev"]


def test_every_written_line_takes_the_fast_path(real_lines: list[bytes]) -> None:
    assert len(real_lines) > 200
    for line in real_lines:
        seq, prev = _position(line)
        assert _fast(line, seq, prev) == _reference(line, seq, prev) is not None


def _edits() -> st.SearchStrategy[Any]:
    return st.tuples(
        st.integers(min_value=0, max_value=10_000),
        st.sampled_from(["replace", "insert", "delete", "swap"]),
        st.sampled_from([*b' "\\,:{}[]0123456789.eE-+tfnu', 0xC3, 0x00, 0x7F]),
    )


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), edits=st.lists(_edits(), min_size=1, max_size=3))
def test_an_edited_line_is_fast_accepted_only_as_the_reference_accepts_it(
    real_lines: list[bytes], data: st.DataObject, edits: list[tuple[int, str, int]]
) -> None:
    line = data.draw(st.sampled_from(real_lines))
    seq, prev = _position(line)
    b = bytearray(line)
    for at, how, byte in edits:
        i = at % (len(b) + 1)
        if how == "replace" and i < len(b):
            b[i] = byte
        elif how == "insert":
            b[i:i] = bytes([byte])
        elif how == "delete" and i < len(b):
            del b[i]
        elif how == "swap" and i + 1 < len(b):
            b[i], b[i + 1] = b[i + 1], b[i]
    edited = bytes(b)
    fast = _fast(edited, seq, prev)
    if fast is not None:
        assert fast == _reference(edited, seq, prev)


_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["é", "\u2028", "\x01", "\ud800", '"', "\\", "sha256:" + "a" * 64]),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "é", "\U0001f600", "\ue000", "z"]), inner),
    ),
    max_leaves=8,
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=_VALUE, key=st.sampled_from(["observation", "detail", "by_tool", "x"]))
def test_any_value_in_a_record_is_fast_accepted_only_as_the_reference_accepts_it(
    real_lines: list[bytes], data: st.DataObject, value: Any, key: str
) -> None:
    """Free-form values (floats, big integers, non-ASCII keys, escapes, any key order) where a
    record has them, or where it has no such member: written canonically (when they can be) and
    as pydantic writes them, in and out of key order."""
    env = json.loads(data.draw(st.sampled_from(real_lines)))
    env["record"][key] = value
    seq, prev = env["seq"], env["prev"]
    candidates = []
    try:
        candidates.append(canonical_bytes(env))
        candidates.append(fast_canonical_bytes(env))
    except ValueError:
        pass
    try:
        import pydantic_core

        body = pydantic_core.to_json(env["record"])
        head = canonical_bytes({"at_ns": env["at_ns"], "prev": prev})[:-1]
        candidates.append(head + b',"record":' + body + b',"seq":%d}' % seq)
    except ValueError:
        pass
    for line in candidates:
        fast = _fast(line, seq, prev)
        if fast is not None:
            assert fast == _reference(line, seq, prev)


def test_a_chain_is_read_with_the_same_entries_either_way(tmp_path: Path) -> None:
    """read_journal (fast path) yields what the reference yields, line by line, and the torn or
    broken lines it refuses are refused with the reference's words."""
    r = _run(tmp_path / "run")
    path = EvidenceStore(r.run_dir).journal_paths()[0]
    prev: str | None = None
    for n, (entry, line) in enumerate(
        zip(J.read_journal(path), path.read_bytes().split(b"\n"), strict=False), start=1
    ):
        p, at_ns, record, leaf = J._checked_line(line, n, prev, "x")
        assert (entry.seq, entry.prev, entry.at_ns, entry.record) == (n, p, at_ns, record)
        assert entry.leaf == "sha256:" + leaf.hex() == J.line_leaf(line)
        assert entry.line_digest == sha256_digest(line)
        prev = entry.line_digest
    data = path.read_bytes()
    path.write_bytes(data[:-1])  # torn last line
    with pytest.raises(EvidenceError, match="torn record"):
        list(J.read_journal(path))
    lines = data.split(b"\n")
    path.write_bytes(b"\n".join([lines[0], lines[0], *lines[2:]]))  # a line repeated
    with pytest.raises(EvidenceError, match=r"line 2: (sequence number 1|chain broken)"):
        list(J.read_journal(path))


# ---------------------------------------------------------------------------- protocol.json


def test_the_protocol_parsed_slot_by_slot_is_the_plain_parse(tmp_path: Path) -> None:
    r = _run(tmp_path / "run")
    raw = (r.run_dir / PROTOCOL_FILE).read_bytes()
    plain = RunProtocol.model_validate_json(raw)
    compact = parse_protocol(raw)
    assert compact == plain and compact.slots == plain.slots
    assert compact.model_dump() == plain.model_dump()
    # shared values: one stratum string and one trigger dict for many slots
    assert len({id(s.stratum) for s in compact.slots}) < len(compact.slots)
    assert len({id(s.schedule.trigger) for s in compact.slots}) < len(compact.slots)


@pytest.mark.parametrize(
    "parameters",
    [
        {"x": [{"bucket": 1}, {"bucket": 2}]},  # `},{"bucket":` inside a slot: the plain way
        {"seed": 1, "schedule": {"seed": 2}},  # member names of a slot inside its schedule
    ],
)
def test_a_protocol_that_does_not_split_is_parsed_the_plain_way(
    tmp_path: Path, parameters: dict[str, Any]
) -> None:
    r = _run(tmp_path / "run")
    doc = json.loads((r.run_dir / PROTOCOL_FILE).read_bytes())
    doc["slots"][1]["schedule"]["parameters"] = parameters
    raw = canonical_bytes(doc)
    assert parse_protocol(raw) == RunProtocol.model_validate_json(raw)
    doc["slots"][1]["seed"] = "one"  # invalid: the plain parse's error
    with pytest.raises(ValueError, match="seed"):
        parse_protocol(canonical_bytes(doc))


def test_a_copied_run_evaluates_alike(tmp_path: Path, parallel: None) -> None:
    """A run directory copied elsewhere derives the same results (no path enters them)."""
    r = _run(tmp_path / "run")
    copy = tmp_path / "copy"
    shutil.copytree(r.run_dir, copy)
    assert derive(copy, FIXED_EVALUATOR)[2] == derive(r.run_dir, FIXED_EVALUATOR)[2]
