"""`bench merge` over real run directories built by the journal writer (tests/evidence/synth.py).

A single run is split by `in_shard` into shard directories the way `bench run --shard i/N` would
leave them (each with its own run id and run journal); merged, they must evaluate to the single
run's results, and every refusal must name the shard (and the cell) with exit 2 or 3 without
touching a shard. The real two-host path (`bench run --shard`) is tests/scale/test_merge_real.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.canonical import canonical_bytes, sha256_digest
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.journal import EvidenceStore, Journal, read_journal
from runner.evaluator.evidence.records import EnvironmentRecorded, RunStarted
from runner.evaluator.protocol.runfile import read_protocol, write_protocol
from runner.evaluator.publish.reproduce import projection
from runner.evaluator.publish.results import derive, verify, write_results
from runner.scale.merge import merge, merged_run_id
from runner.scale.shard import in_shard
from tests.evidence import synth

OUTCOMES = ("completed", "failed", "duplicate", "harness", "pre_trigger")


def _outcome(i: int, _slot: object) -> str:
    return OUTCOMES[i % len(OUTCOMES)]


def _single(root: Path) -> synth.Run:
    r = synth.Run(root / "single")
    r.fill("a", lambda i, s: "completed")
    r.fill("b", _outcome)
    # a second attempt for a harness-invalid cell, as the executor's retry would write it
    for i, (cell, slot) in enumerate(r.cells("b")):
        if _outcome(i, slot) == "harness":
            r.write_attempt("b", cell, slot, 2, "completed")
    _run_journal(r.run_dir, "test")
    return r


def _run_journal(run_dir: Path, run_id: str) -> None:
    rp = read_protocol(run_dir)
    store = EvidenceStore(run_dir)
    artifact = store.put_json_blob({"host": run_id})
    with store.journal("run") as j:
        j.append(
            RunStarted(
                run_id=run_id,
                spec_path="spec_ab.toml",
                spec_digest=sha256_digest(rp.spec_text.encode()),
                protocol_hash=rp.identities.protocol_hash,
                protocol_status="frozen" if rp.freeze_record else "draft",
                identities=rp.identities.model_dump(mode="json"),
            )
        )
        j.append(EnvironmentRecorded(artifact=artifact, execution_environment_hash=artifact))


def _split(single: Path, root: Path, count: int) -> list[Path]:
    """Shard directories of `single` by `in_shard`, each with its own run id and run journal."""
    rp = read_protocol(single)
    cells = {
        e.record.cell_id[7:23]: e.record.cell_id
        for _, e in EvidenceStore(single).entries()
        if getattr(e.record, "cell_id", None)
    }
    shards = []
    for index in range(count):
        d = root / f"shard-{index}"
        run_id = f"{index:06x}"
        write_protocol(d, rp.model_copy(update={"run_id": run_id}))
        (d / "journals").mkdir()
        (d / "blobs" / "sha256").mkdir(parents=True)
        for path in sorted((single / "journals").glob("*-a*.jsonl")):
            if in_shard(cells[path.name[:16]], index, count):
                shutil.copyfile(path, d / "journals" / path.name)
        # synth attempts name no blob; each shard's run journal names its own artifact
        _run_journal(d, run_id)
        shards.append(d)
    return shards


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _projections(run_dir: Path) -> dict[str, list[bytes]]:
    _, results, _ = derive(run_dir, evaluator_digest())
    return {s: projection(r.evaluation.terminal_records) for s, r in results.items()}


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("merge")
    single = _single(root).run_dir
    return single, _split(single, root, 2)


def _fresh(split: tuple[Path, list[Path]], tmp_path: Path) -> list[Path]:
    """Copies of the shards a test may damage."""
    out = []
    for d in split[1]:
        shutil.copytree(d, tmp_path / d.name)
        out.append(tmp_path / d.name)
    return out


def test_both_shards_hold_cells(split: tuple[Path, list[Path]]) -> None:
    for d in split[1]:
        assert list((d / "journals").glob("*-a1.jsonl")), f"{d} is empty: the split proves nothing"


def test_merge_equals_single_run(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    single, shards = split
    before = {d: _tree(d) for d in shards}
    out = tmp_path / "merged"
    summary = merge(shards, out)
    assert {d: _tree(d) for d in shards} == before  # the shards are only read
    assert summary.cells_with_evidence == summary.cells_in_protocol
    assert _projections(out) == _projections(single)
    _, _, files = derive(out, evaluator_digest())
    write_results(out, files)
    assert verify(out, evaluator_digest()) == []
    # every attempt journal byte for byte; every run-level record with its own time
    for path in (single / "journals").glob("*-a*.jsonl"):
        assert (out / "journals" / path.name).read_bytes() == path.read_bytes()
    merged_run = [e.record for e in read_journal(out / "journals" / "run.jsonl")]
    shard_run = [e.record for d in shards for e in read_journal(d / "journals" / "run.jsonl")]
    run_id = read_protocol(out).run_id
    assert merged_run == [  # each shard's records, run_started bound to the merged run id
        r.model_copy(update={"run_id": run_id}) if isinstance(r, RunStarted) else r
        for r in shard_run
    ]
    assert read_protocol(out).run_id == merged_run_id(["000000", "000001"])
    assert oct(out.stat().st_mode & 0o777) == "0o700"


def test_merge_is_deterministic_and_order_free(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    _, shards = split
    merge(shards, tmp_path / "one")
    merge(list(reversed(shards)), tmp_path / "two")
    assert _tree(tmp_path / "one") == _tree(tmp_path / "two")


def test_cli_merge_then_evaluate_and_verify(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    single, shards = split
    out = tmp_path / "merged"
    r = CliRunner().invoke(app, ["merge", *map(str, shards), "--out", str(out)])
    assert r.exit_code == 0, r.output
    a = CliRunner().invoke(app, ["evaluate", str(out)])
    b = CliRunner().invoke(app, ["evaluate", str(single)])
    assert a.exit_code == b.exit_code, (a.output, b.output)
    v = CliRunner().invoke(app, ["verify", str(out)])
    assert v.exit_code == 0, v.output


def test_a_missing_shard_merges_as_incomplete(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    summary = merge(split[1][:1], tmp_path / "half")
    assert 0 < summary.cells_with_evidence < summary.cells_in_protocol


# ------------------------------------------------------------------------------------ refusals


def _cli(args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["merge", *args])
    return r.exit_code, " ".join(r.output.split())


def test_overlapping_shards_refused(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0, s1 = _fresh(split, tmp_path)
    moved = sorted((s0 / "journals").glob("*-a1.jsonl"))[0]
    shutil.copyfile(moved, s1 / "journals" / moved.name)
    cell = next(read_journal(moved)).record.cell_id  # type: ignore[union-attr]
    before = _tree(s0), _tree(s1)
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 2, text
    assert "overlapping" in text and cell in text and str(s1) in text and str(s0) in text
    assert not (tmp_path / "m").exists()
    assert (_tree(s0), _tree(s1)) == before


def _rewrite(source: Path, target: Path, **update: object) -> None:
    """A well-formed journal (chain recomputed) of `source`'s records with fields changed."""
    entries = list(read_journal(source))
    times = iter(int(e.at_ns) for e in entries)
    with Journal(target, clock=lambda: next(times)) as j:
        for e in entries:
            j.append(e.record.model_copy(update=update))


def test_same_cell_other_attempt_in_two_shards_refused(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    s0, s1 = _fresh(split, tmp_path)
    first = sorted((s0 / "journals").glob("*-a1.jsonl"))[0]
    cell = next(read_journal(first)).record.cell_id  # type: ignore[union-attr]
    # the cell's attempt 2, well formed, in the other shard: one cell run on two hosts
    _rewrite(first, s1 / "journals" / first.name.replace("-a1", "-a2"), attempt=2)
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 2, text
    assert "overlapping" in text and cell in text and str(s0) in text and str(s1) in text
    assert not (tmp_path / "m").exists()


def test_different_protocols_refused(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0 = _fresh(split, tmp_path)[0]
    other = synth.Run(tmp_path / "other", evaluator="sha256:" + "0" * 64).run_dir
    code, text = _cli([str(s0), str(other), "--out", str(tmp_path / "m")])
    assert code == 2, text
    assert "different protocols" in text and str(other) in text
    assert not (tmp_path / "m").exists()


def test_same_hash_other_protocol_file_refused(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    s0, s1 = _fresh(split, tmp_path)
    rp = read_protocol(s1)
    (s1 / "protocol.json").unlink()
    write_protocol(s1, rp.model_copy(update={"freeze_record": None}))  # a draft run of it
    for blob in (s1 / "blobs" / "sha256").iterdir():
        blob.unlink()
    (s1 / "journals" / "run.jsonl").unlink()
    _run_journal(s1, rp.run_id)
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 2, text
    assert "freeze_record" in text and str(s1) in text


def test_broken_chain_refused_naming_shard_and_cell(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    s0, s1 = _fresh(split, tmp_path)
    victim = sorted((s1 / "journals").glob("*-a1.jsonl"))[-1]
    cell = next(read_journal(victim)).record.cell_id  # type: ignore[union-attr]
    lines = victim.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"at_ns":"', b'"at_ns":"9', 1)  # line 2 edited: 3's prev breaks
    victim.write_bytes(b"\n".join(lines))
    before = _tree(s1)
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert str(s1) in text and cell in text and victim.name in text
    assert not (tmp_path / "m").exists()
    assert _tree(s1) == before


def test_torn_tail_refused_with_resume_hint(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0, s1 = _fresh(split, tmp_path)
    victim = sorted((s0 / "journals").glob("*-a1.jsonl"))[0]
    with open(victim, "ab") as fh:
        fh.write(b'{"at_ns":"1')
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert "torn" in text and "--resume" in text and str(s0) in text


def test_missing_referenced_blob_refused(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0, s1 = _fresh(split, tmp_path)
    artifact = canonical_bytes({"host": "000001"})
    for d in (s0, s1):  # the blob exists nowhere
        (d / "blobs" / "sha256" / sha256_digest(artifact)[7:]).unlink(missing_ok=True)
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert sha256_digest(artifact)[7:] in text and str(s1) in text


def test_altered_blob_refused(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0, s1 = _fresh(split, tmp_path)
    blob = sorted((s0 / "blobs" / "sha256").iterdir())[0]
    os.chmod(blob, 0o600)
    blob.write_bytes(b"not what the address says")
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert blob.name in text and str(s0) in text


def test_unexpected_file_refused(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0, s1 = _fresh(split, tmp_path)
    (s1 / "journals" / "notes.txt").write_text("hello")
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert "notes.txt" in text and str(s1) in text


def test_unarchived_ledger_of_a_crash_refused(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    s0, s1 = _fresh(split, tmp_path)
    (s0 / "destination").mkdir()
    (s0 / "destination" / "0123456789abcdef-a1.jsonl").write_text('{"effect":1}\n')
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert "destination" in text and "never dropped" in text and str(s0) in text


def test_cell_outside_protocol_refused(split: tuple[Path, list[Path]], tmp_path: Path) -> None:
    s0, s1 = _fresh(split, tmp_path)
    victim = sorted((s0 / "journals").glob("*-a1.jsonl"))[0]
    fake = "sha256:" + "f" * 64
    _rewrite(victim, s0 / "journals" / ("f" * 16 + "-a1.jsonl"), cell_id=fake)
    code, text = _cli([str(s0), str(s1), "--out", str(tmp_path / "m")])
    assert code == 3, text
    assert fake in text and "not in the protocol" in text and str(s0) in text


def test_output_exists_refused_and_untouched(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep").write_text("mine")
    code, text = _cli([*map(str, split[1]), "--out", str(out)])
    assert code == 2, text
    assert "exists" in text
    assert [p.name for p in out.iterdir()] == ["keep"]


def test_not_a_run_directory_and_shard_given_twice(
    split: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    code, text = _cli([str(tmp_path / "empty"), "--out", str(tmp_path / "m")])
    assert code == 2 and "not a run directory" in text
    s0 = split[1][0]
    code, text = _cli([str(s0), str(s0), "--out", str(tmp_path / "m")])
    assert code == 2 and "twice" in text
    code, text = _cli([str(s0), "--out", str(s0 / "inside")])
    assert code == 2 and "inside shard" in text
