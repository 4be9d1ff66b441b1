"""Evaluation streams from journals: the bounded-memory evidence root equals its definition, a
cell's journals are grouped exactly (a misplaced record is refused), and streamed evidence
decides exactly what the same records held in memory decide."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence.hashing import EvidenceRoot, evidence_root
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.evidence.records import (
    EnvironmentRecorded,
    LifecycleTransition,
    QuarantinedTail,
)
from runner.evaluator.protocol.matrix import cell_id
from runner.evaluator.publish.results import derive
from runner.evaluator.verdict.eligibility import evaluate_run
from runner.evaluator.verdict.terminals import TerminalSpill, registered_cells
from tests.evidence.synth import Run
from tests.evidence.test_vectors import FIXED_EVALUATOR


def _definition(leaves: list[bytes]) -> str:
    """The root as defined: SHA-256 over the domain tag and the sorted `sha256:<hex>` lines."""
    h = hashlib.sha256(b"afb.evidence-root/1\n")
    for leaf in sorted("sha256:" + x.hex() for x in leaves):
        h.update(leaf.encode() + b"\n")
    return "sha256:" + h.hexdigest()


# Leaves crowded into a few first bytes and repeated, so buckets split again and spill.
_LEAF = st.one_of(
    st.binary(min_size=32, max_size=32),
    st.tuples(
        st.sampled_from([b"\x00", b"\x00\x00", b"\xff"]), st.binary(min_size=31, max_size=31)
    ).map(lambda t: (t[0] + t[1])[:32].ljust(32, b"\x00")),
    st.sampled_from([b"\x00" * 32, b"\x01" * 32]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_LEAF, max_size=120),
    st.sampled_from([32, 96, 320, 1 << 20]),
    st.sampled_from([1, 2, 5, 1 << 20]),
    st.randoms(use_true_random=False),
)
def test_bounded_memory_root_equals_its_definition(leaves, spill, bucket, rnd) -> None:
    shuffled = list(leaves)
    rnd.shuffle(shuffled)
    root = EvidenceRoot(spill_bytes=spill, bucket_leaves=bucket)
    for x in shuffled:
        root.add_digest(x)
    assert root.value() == _definition(leaves)
    assert evidence_root("sha256:" + x.hex() for x in shuffled) == _definition(leaves)
    if leaves:  # a dropped or changed leaf changes the root
        assert evidence_root("sha256:" + x.hex() for x in leaves[1:]) != _definition(leaves)
        changed = bytes([leaves[0][0] ^ 1]) + leaves[0][1:]
        other = ["sha256:" + x.hex() for x in [changed, *leaves[1:]]]
        assert evidence_root(other) != _definition(leaves)


def test_a_leaf_is_a_digest() -> None:
    with pytest.raises(ValueError):
        EvidenceRoot().add("sha256:00")
    with pytest.raises(ValueError):
        EvidenceRoot().add_digest(b"\x00" * 31)


def _mixed_run(run_dir: Path) -> Run:
    r = Run(run_dir, evaluator=FIXED_EVALUATOR, fixed_clock=True)
    outcomes = ["completed", "failed", None, "noop", "pre_trigger", "harness", "duplicate"]
    for i, (cell, slot) in enumerate(r.cells("a")):
        o = outcomes[i % len(outcomes)]
        if o is not None:
            r.write_attempt("a", cell, slot, 1, o)
        if o in ("noop", "harness"):
            r.write_attempt("a", cell, slot, 2, "completed")
    r.fill("b", lambda i, s: "completed")
    return r


def test_streamed_evidence_decides_what_the_same_records_in_memory_decide(tmp_path) -> None:
    r = _mixed_run(tmp_path / "run")
    store = EvidenceStore(r.run_dir)
    entries = [(j, e.seq, e.record) for j, e in store.entries()]
    leaves = [e.leaf for _, e in store.entries()]
    held = evaluate_run(
        r.protocol, LoadedEvidence(entries, evidence_root(leaves), []), FIXED_EVALUATOR
    )
    streamed = evaluate_run(r.protocol, LoadedEvidence.from_store(store), FIXED_EVALUATOR)
    assert set(held) == set(streamed) == {"a", "b"}
    for s in held:
        assert streamed[s].proof == held[s].proof
        assert streamed[s].terminal_jsonl == held[s].terminal_jsonl


def test_the_root_is_known_once_the_journals_are_read(tmp_path) -> None:
    r = _mixed_run(tmp_path / "run")
    ev = LoadedEvidence.from_store(EvidenceStore(r.run_dir))
    with pytest.raises(RuntimeError):
        ev.evidence_root_hash  # noqa: B018
    groups = list(ev.cell_groups())
    assert [p for p, _ in groups] == sorted({p for p, _ in groups})  # one group per prefix
    assert ev.evidence_root_hash.startswith("sha256:")
    with pytest.raises(RuntimeError):
        list(ev.cell_groups())  # a stream, read once


def _misplace(r: Run, journal: str, record) -> None:
    with r.store.journal(journal) as j:
        j.append(record)


@pytest.mark.parametrize("where", ["other cell", "other attempt", "run journal", "environment"])
def test_a_record_outside_the_journal_its_cell_names_is_refused(tmp_path, where) -> None:
    r = Run(tmp_path / "run", evaluator=FIXED_EVALUATOR, fixed_clock=True)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    (c0, _), (c1, _) = r.cells("a")[:2]
    moved = LifecycleTransition(cell_id=c1, attempt=1, fault_id="x", state="armed")
    if where == "other cell":
        _misplace(r, f"{c0[7:23]}-a1", moved)
    elif where == "other attempt":
        _misplace(r, f"{c1[7:23]}-a1", moved.model_copy(update={"attempt": 2}))
    elif where == "run journal":
        _misplace(r, "run", moved)
    else:
        env = EnvironmentRecorded(
            artifact="sha256:" + "1" * 64, execution_environment_hash="sha256:" + "2" * 64
        )
        _misplace(r, f"{c0[7:23]}-a1", env)
    with pytest.raises(EvidenceError, match="journal"):
        derive(r.run_dir, FIXED_EVALUATOR)


def test_a_quarantined_tail_may_sit_in_an_attempt_journal(tmp_path) -> None:
    r = Run(tmp_path / "run", evaluator=FIXED_EVALUATOR, fixed_clock=True)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    c0, _ = r.cells("a")[0]
    _misplace(r, f"{c0[7:23]}-a1", QuarantinedTail(file="x", sha256="sha256:" + "3" * 64, size=1))
    _, out, _ = derive(r.run_dir, FIXED_EVALUATOR)
    assert out["a"].evaluation.proof.decision == "eligible"


def test_cells_sharing_a_journal_prefix_are_grouped_by_their_full_id() -> None:
    r = Run(Path("/nonexistent"), in_memory=True)
    slots = [s for _, s in r.cells("a")][:3]
    prefix = "0123456789abcdef"
    a, b, c, d = ("sha256:" + prefix + ch * 48 for ch in "0123")
    early = "sha256:" + "0" * 64  # an unregistered cell before every registered one
    for cell, slot in ((a, slots[0]), (b, slots[1])):
        r.write_attempt("a", cell, slot, 1, "completed")

    def spill(extra: list[str]):
        rr = Run(Path("/nonexistent"), in_memory=True)
        rr.memory = list(r.memory or [])
        for cell in extra:
            rr.write_attempt("a", cell, slots[2], 1, "completed")
        ev = LoadedEvidence(list(rr.memory), "sha256:" + "0" * 64, [])
        registered = iter([(a, "a", slots[0]), (b, "a", slots[1]), (d, "a", slots[2])])
        return TerminalSpill.derive(r.protocol, ev, registered)

    with spill([]) as s:
        assert not s.unregistered
        records = list(s.records("a"))
        assert [t.cell_id for t in records] == [a, b, d]
        assert [t.status is not None for t in records] == [True, True, False]
    for extra in ([c], [early]):
        with spill(extra) as s:
            assert s.unregistered
            assert [t.cell_id for t in s.records("a")] == [a, b, d]


def test_registered_cells_come_in_cell_id_order_the_last_registration_standing() -> None:
    r = Run(Path("/nonexistent"), in_memory=True)
    rp = r.protocol
    expected: dict[str, tuple[str, object]] = {}
    again = rp.slots[0].model_copy(update={"stratum": "registered again"})
    doubled = rp.model_copy(update={"slots": [*rp.slots, again]})
    for subject, shash in sorted(rp.identities.subject_config_hashes.items()):
        for slot in doubled.slots:
            expected[cell_id(slot.slot_id, shash)] = (subject, slot)
    got = list(registered_cells(doubled))
    assert [(c, s, x) for c, s, x in got] == [(c, *v) for c, v in sorted(expected.items())]
    assert sum(x is again for _, _, x in got) == len(rp.identities.subject_config_hashes)
