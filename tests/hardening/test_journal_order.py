"""Evidence checks that stand without signatures (issue 29): an attempt journal's record order is
bound (`at_ns` never decreases; `seq` is the position), so records reordered with the chain and
the sequence numbers recomputed are refused by `--allow-unsigned` checks too; a journal with no
record is refused; the writer creates a journal with its first record and holds its clock
non-decreasing."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.evidence.journal import Journal, read_journal
from runner.evaluator.evidence.records import QuarantinedTail
from tests.foundation.helpers import bench
from tests.hardening.runs import evaluated


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evaluated(tmp_path_factory.mktemp("order") / "run").run_dir


def _biggest(run: Path) -> Path:
    attempts = [p for p in (run / "journals").iterdir() if p.name != "run.jsonl"]
    return max(attempts, key=lambda p: p.stat().st_size)


def _rechain(path: Path, order: list[int]) -> None:
    entries = list(read_journal(path))
    entries = [entries[i] for i in order]
    times = iter(int(e.at_ns) for e in entries)
    path.unlink()
    with Journal(path, clock=lambda: next(times)) as j:
        for e in entries:
            j.append(e.record)


def test_reordered_records_with_a_recomputed_chain_are_refused_unsigned(
    pristine: Path, tmp_path: Path
) -> None:
    run = shutil.copytree(pristine, tmp_path / "run")
    assert bench("verify", run, "--allow-unsigned").exit_code == 0  # negative control
    journal = _biggest(run)
    n = len(list(read_journal(journal)))
    _rechain(journal, [0, 2, 1, *range(3, n)])
    for argv in (["verify", run, "--allow-unsigned"], ["reproduce", run, "--allow-unsigned"]):
        res = bench(*argv)
        assert res.exit_code == 3, res.output
        assert journal.name in res.output and "out of order" in res.output, res.output


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_reordering_is_refused(pristine: Path, tmp_path: Path, data: st.DataObject) -> None:
    """For every permutation of an attempt journal's records that is not the identity, chain
    and seq recomputed and each record keeping its time, reading the journal refuses it (the
    synthetic runtime's times are strictly increasing, as a real attempt's are)."""
    src = _biggest(pristine)
    n = len(list(read_journal(src)))
    order = data.draw(st.permutations(range(n)))
    if order == list(range(n)):
        return
    path = tmp_path / f"{data.draw(st.integers(0, 10**9))}-{src.name}"
    path.write_bytes(src.read_bytes())
    _rechain(path, order)
    with pytest.raises(EvidenceError, match="out of order"):
        list(read_journal(path))


def test_the_run_journal_is_exempt(tmp_path: Path) -> None:
    """run.jsonl may run backwards: `bench merge` concatenates concurrent shards' run journals."""
    times = iter([5, 3])
    path = tmp_path / "run.jsonl"
    with Journal(path, clock=lambda: next(times)) as j:
        for _ in range(2):
            j.append(QuarantinedTail(file="x", sha256="sha256:" + "0" * 64, size=1))
    assert len(list(read_journal(path))) == 2
    other = tmp_path / "0123456789abcdef-a1.jsonl"
    other.write_bytes(path.read_bytes())
    with pytest.raises(EvidenceError, match="out of order"):
        list(read_journal(other))


@pytest.mark.parametrize("name", ["fedcba9876543210-a1.jsonl", "run.jsonl", "x"])
def test_an_empty_journal_is_refused(pristine: Path, tmp_path: Path, name: str) -> None:
    run = shutil.copytree(pristine, tmp_path / "run")
    target = run / "journals" / name
    if name == "x":
        target = _biggest(run)
    target.write_bytes(b"")
    for argv in (["verify", run, "--allow-unsigned"], ["evaluate", run]):
        res = bench(*argv)
        assert res.exit_code == 3, res.output
        assert "empty journal" in res.output


def test_a_journal_is_created_by_its_first_record(tmp_path: Path) -> None:
    path = tmp_path / "0123456789abcdef-a1.jsonl"
    j = Journal(path)
    assert not path.exists()  # a crash now leaves nothing, not an empty journal
    j.append(QuarantinedTail(file="x", sha256="sha256:" + "0" * 64, size=1))
    assert path.stat().st_size > 0
    j.close()
    with pytest.raises(ValueError, match="closed"):
        j.append(QuarantinedTail(file="x", sha256="sha256:" + "0" * 64, size=1))


def test_the_writer_holds_its_clock_non_decreasing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock stepping back (NTP) never writes a journal its reader would refuse."""
    path = tmp_path / "0123456789abcdef-a1.jsonl"
    j = Journal(path)
    real = time.time_ns()
    steps = iter([real, real - 10**9, real + 5])
    monkeypatch.setattr(j, "_clock", lambda: next(steps))
    for _ in range(3):
        j.append(QuarantinedTail(file="x", sha256="sha256:" + "0" * 64, size=1))
    j.close()
    assert [int(e.at_ns) for e in read_journal(path)] == [real, real, real + 5]
    # and a reopened journal continues from its last time
    j = Journal(path)
    monkeypatch.setattr(j, "_clock", lambda: real - 1)
    j.append(QuarantinedTail(file="x", sha256="sha256:" + "0" * 64, size=1))
    j.close()
    assert int(list(read_journal(path))[-1].at_ns) == real + 5


def test_a_journal_for_no_registered_cell_is_refused_even_re_evaluated(tmp_path: Path) -> None:
    """A well-formed journal named for (and holding records of) a cell the protocol does not
    register, with the results re-derived to include it: verify refuses it unsigned."""
    from runner.evaluator.core.inputs import evaluator_digest
    from runner.evaluator.publish.results import derive, write_results
    from tests.evidence.synth import Run
    from tests.hardening.runs import run_journal

    r = Run(tmp_path / "run")
    run_journal(r)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    _, slot = r.cells("a")[0]
    r.write_attempt("a", "sha256:" + "e" * 64, slot, 1, "completed")
    write_results(r.run_dir, derive(r.run_dir, evaluator_digest())[2])
    res = bench("verify", r.run_dir, "--allow-unsigned")
    assert res.exit_code == 3, res.output
    assert "eeeeeeeeeeeeeeee-a1.jsonl: names no cell of the protocol" in res.output
    (r.run_dir / "journals" / "eeeeeeeeeeeeeeee-a1.jsonl").unlink()  # negative control
    write_results(r.run_dir, derive(r.run_dir, evaluator_digest())[2])
    assert bench("verify", r.run_dir, "--allow-unsigned").exit_code == 0
