"""`bench merge`: shard run directories (`bench run --shard i/N` on N hosts) into one run
directory that `bench evaluate` / `bench verify` treat exactly like a single-host run.

Nothing here runs anything: a merge is a pure function of the shard directories, which it only
reads. Every shard is checked before a byte is written:

- it passes the evaluator's own layout check, as `bench verify` runs it (evidence/layout.py:
  every entry expected, no symlink or special file, every referenced blob present and at its
  address and none unreferenced, every torn tail recorded, run_started naming its protocol.json);
  results/ is derived and left behind; a regraded shard is refused (merge the originals, then
  regrade the merge);
- its protocol.json is canonical and self-consistent, and equal, byte for byte apart from the
  run id, to every other shard's (same protocol hash, hence the same evaluator digest, spec,
  slots, witness contracts and freeze record);
- every journal's hash chain is intact and every record sits in the journal its cell and attempt
  name; every attempt journal's cell belongs to the protocol; no cell has evidence in two shards.

Input mistakes (not a run directory, different protocols, overlapping shards, an existing output)
are `InputError` (exit 2); damaged evidence (a broken chain, a missing or altered blob) is
`EvidenceError` (exit 3). Each names the shard directory and, where there is one, the cell.

The merged directory:

- `protocol.json`: the shards' protocol with one run id: the shards' own when they all share one,
  else `sha256("afb.merge/1\\n" + sorted shard run ids, one per line)[:6]`, so merging the same
  shards twice gives the same bytes.
- `journals/<cell16>-a<n>.jsonl` and their quarantined tails: copied byte for byte.
- `journals/run.jsonl`: every shard's run-level records (its run_started records, environment
  records, quarantined tails), shard after shard in order of their first record's time, each
  with its original `at_ns`, chained anew. The layout binds every run_started to the run id of
  the protocol.json beside it, so a shard's run_started is re-stamped with the merged run id
  (nothing else in it changes); its environment records are kept verbatim (their evidence-root
  leaves are the shards' own). The shard run ids are printed by `bench merge`, not kept.
- `blobs/sha256/`: the union of the shards' blobs (content-addressed: equal names, equal bytes).

The output directory must not exist; it is created first (that is the reservation) and
protocol.json is written last, so an interrupted merge leaves a directory that no command takes
for a run. On a refusal found while copying, the partial output is removed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.evaluator.core.canonical import sha256_digest
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.evidence.journal import BLOBS, JOURNALS, Entry, Journal, read_journal
from runner.evaluator.evidence.layout import check as check_layout
from runner.evaluator.evidence.layout import run_record_problems
from runner.evaluator.evidence.loading import ATTEMPT_JOURNAL, check_placement
from runner.evaluator.evidence.records import RunStarted, blob_refs
from runner.evaluator.protocol.matrix import cells_for
from runner.evaluator.protocol.runfile import (
    PROTOCOL_FILE,
    RunProtocol,
    canonical_pieces,
    consistency_problems,
    read_protocol,
    write_protocol,
)

RESULTS = "results"
RUN_JOURNAL = "run"
_CELL_IN_LINE = re.compile(rb'"cell_id":"(sha256:[0-9a-f]{64})"')
MERGE_DOMAIN = "afb.merge/1\n"


@dataclass
class _Shard:
    """One shard directory, as read and checked."""

    path: Path
    protocol: RunProtocol
    normalized: bytes  # protocol.json's canonical bytes with the run id blanked
    attempt_journals: list[Path] = field(default_factory=list)
    torn: list[Path] = field(default_factory=list)
    blobs: list[Path] = field(default_factory=list)
    run_entries: list[Entry] = field(default_factory=list)
    cells: dict[str, set[int]] = field(default_factory=dict)  # cell id -> attempts

    @property
    def run_id(self) -> str:
        return self.protocol.run_id


@dataclass(frozen=True)
class MergeSummary:
    out: Path
    run_id: str
    shards: int
    cells_with_evidence: int
    cells_in_protocol: int
    attempts: int
    blobs: int
    shard_run_ids: tuple[str, ...] = ()


def merge(shard_dirs: Sequence[Path], out: Path) -> MergeSummary:
    """Check every shard, then write the merged run directory `out` (which must not exist)."""
    if not shard_dirs:
        raise InputError("give at least one shard run directory to merge")
    seen: dict[Path, Path] = {}
    for d in shard_dirs:
        real = d.resolve()
        if real in seen:
            raise InputError(f"shard given twice (also as {seen[real]})", file=str(d))
        seen[real] = d
    out_real = out.resolve()
    if out.exists() or out.is_symlink():
        raise InputError("output exists; merge never overwrites (give a new path)", file=str(out))
    for real, d in seen.items():
        if out_real == real or real in out_real.parents:
            raise InputError(
                f"output lies inside shard {d}; shards are never modified", file=str(out)
            )
    shards = [_open_shard(d) for d in shard_dirs]
    _check_same_protocol(shards)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        out.mkdir(mode=0o700)  # the reservation: fails if someone else made it meanwhile
    except FileExistsError:
        raise InputError("output exists; merge never overwrites", file=str(out)) from None
    try:
        return _write(shards, out)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


# ------------------------------------------------------------------------------ reading shards


def _open_shard(path: Path) -> _Shard:
    if not path.is_dir():
        raise InputError("not a run directory", file=str(path))
    if not (path / PROTOCOL_FILE).is_file():
        raise InputError("not a run directory (no protocol.json)", file=str(path))
    if (path / RESULTS / "regrade.json").exists():
        raise InputError(
            "a regraded run directory: merge the original shards, then regrade the merge",
            file=str(path),
        )
    try:
        rp = read_protocol(path)
    except EvidenceError as exc:
        raise EvidenceError(f"shard {path}: {exc}") from None
    problems = consistency_problems(rp)
    if problems:
        raise EvidenceError(f"shard {path}: {PROTOCOL_FILE}: {problems[0]}")
    # The evaluator's own layout check, as `bench verify` runs it: every entry expected, no
    # symlink or special file, every referenced blob present and at its address, none extra,
    # every torn tail recorded, run_started naming this protocol.json.
    layout, refs, problems = check_layout(path)
    if refs is not None:
        problems = problems or run_record_problems(rp, refs.started)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        if problems[0].startswith("destination"):
            more += "; the ledgers of attempts cut off by a crash: not merged, never dropped"
        raise EvidenceError(f"shard {path}: {_with_cell(path, problems[0])}{more}")
    normalized = b"".join(canonical_pieces(rp.model_copy(update={"run_id": ""})))
    shard = _Shard(path, rp, normalized)
    for name in layout.journals:
        if name != f"{RUN_JOURNAL}.jsonl":
            shard.attempt_journals.append(path / JOURNALS / name)
    shard.torn = [path / JOURNALS / name for name in layout.torn]
    shard.blobs = [path / BLOBS / name for name in sorted(layout.blobs)]
    return shard


_ATTEMPT_IN_TEXT = re.compile(r"journals/([0-9a-f]{16}-a[1-9][0-9]*\.jsonl)")


def _with_cell(shard: Path, problem: str) -> str:
    """A problem about an attempt journal, with the full id of the cell it belongs to."""
    m = _ATTEMPT_IN_TEXT.search(problem)
    cell = _cell_of(shard / JOURNALS / m[1]) if m else None
    return f"{problem} (cell {cell})" if cell else problem


def _evidence(shard: _Shard, rel: str, message: str) -> EvidenceError:
    return EvidenceError(f"shard {shard.path}: {rel}: {message}")


def _check_same_protocol(shards: list[_Shard]) -> None:
    first = shards[0]
    for other in shards[1:]:
        a, b = first.protocol.identities, other.protocol.identities
        if a.protocol_hash != b.protocol_hash:
            raise InputError(
                f"shards of different protocols: {first.path} is {a.protocol_hash}, "
                f"{other.path} is {b.protocol_hash}",
                file=str(other.path),
            )
        if other.normalized != first.normalized:
            fields = [
                f
                for f in RunProtocol.model_fields
                if f != "run_id" and getattr(first.protocol, f) != getattr(other.protocol, f)
            ]
            raise InputError(
                f"protocol.json differs from {first.path}'s beyond the run id "
                f"(in {', '.join(fields) or 'its bytes'}): not shards of one run",
                file=str(other.path),
            )


# -------------------------------------------------------------------------------------- writing


def merged_run_id(run_ids: Sequence[str]) -> str:
    """The merged run's id: the shards' own when all share one, else derived from them all."""
    if len(set(run_ids)) == 1:
        return run_ids[0]
    body = MERGE_DOMAIN + "".join(f"{r}\n" for r in sorted(run_ids))
    return hashlib.sha256(body.encode()).hexdigest()[:6]


def _write(shards: list[_Shard], out: Path) -> MergeSummary:
    (out / JOURNALS).mkdir(mode=0o700)
    (out / BLOBS).mkdir(mode=0o700, parents=True)
    protocol = shards[0].protocol
    all_cells = {
        c.cell_id
        for sid, h in protocol.identities.subject_config_hashes.items()
        for c in cells_for(protocol.slots, sid, h)
    }
    owner: dict[str, _Shard] = {}
    attempts = 0
    referenced: dict[str, tuple[_Shard, str]] = {}  # blob address -> first referrer
    for shard in shards:
        for path in shard.attempt_journals:
            copy = out / JOURNALS / path.name
            if copy.exists():  # the same attempt journal name in two shards
                cell = _cell_of(path) or path.stem
                raise InputError(
                    f"overlapping shards: cell {cell} attempt journal {path.name} is in "
                    f"{_shard_of(shards, copy.name, shard).path} and in {shard.path}",
                    file=str(shard.path),
                )
            _copy_file(path, copy)
            cells = _read_attempt_journal(shard, path, copy, referenced)
            for cell, n in cells:
                if cell not in all_cells:
                    raise _evidence(
                        shard, f"{JOURNALS}/{path.name}", f"cell {cell} is not in the protocol"
                    )
                prior = owner.get(cell)
                if prior is not None and prior is not shard:
                    raise InputError(
                        f"overlapping shards: cell {cell} has evidence in {prior.path} "
                        f"and in {shard.path}",
                        file=str(shard.path),
                    )
                owner[cell] = shard
                shard.cells.setdefault(cell, set()).add(n)
            attempts += 1
        _read_run_journal(shard, referenced)
    run_id = merged_run_id([s.run_id for s in shards])
    _write_run_journal(shards, out, run_id)
    _copy_torn(shards, out)
    blobs = _copy_blobs(shards, out, referenced)
    write_protocol(out, protocol.model_copy(update={"run_id": run_id}))
    _fsync_tree(out)
    return MergeSummary(
        out=out,
        run_id=run_id,
        shards=len(shards),
        cells_with_evidence=len(owner),
        cells_in_protocol=len(all_cells),
        attempts=attempts,
        blobs=blobs,
        shard_run_ids=tuple(s.run_id for s in shards),
    )


def _shard_of(shards: list[_Shard], journal: str, default: _Shard) -> _Shard:
    for s in shards:
        if any(p.name == journal for p in s.attempt_journals):
            return s
    return default


def _cell_of(path: Path) -> str | None:
    """The full cell id named inside a journal (for messages about a journal that is damaged)."""
    try:  # a regular file only, never followed, never waited on (a FIFO named by the problem)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        m = _CELL_IN_LINE.search(os.read(fd, 1 << 16))
    except OSError:
        return None
    finally:
        os.close(fd)
    return m[1].decode() if m else None


def _read_entries(shard: _Shard, source: Path, copy: Path) -> Iterator[Entry]:
    """The copy's verified entries; a problem is reported against the shard's own file."""
    try:
        yield from read_journal(copy)
    except EvidenceError as exc:
        text = str(exc).replace(str(copy), str(source))
        if "torn record" in text:
            text += "; resume that shard (bench run --resume) before merging"
        cell = _cell_of(source) if ATTEMPT_JOURNAL.fullmatch(source.stem) else None
        raise EvidenceError(
            f"shard {shard.path}: {text}" + (f" (cell {cell})" if cell else "")
        ) from None


def _read_attempt_journal(
    shard: _Shard, source: Path, copy: Path, referenced: dict[str, tuple[_Shard, str]]
) -> set[tuple[str, int]]:
    cells: set[tuple[str, int]] = set()
    name = source.stem
    for entry in _read_entries(shard, source, copy):
        try:
            check_placement(name, entry.record)
        except EvidenceError as exc:
            raise EvidenceError(f"shard {shard.path}: {exc}") from None
        cell = getattr(entry.record, "cell_id", None)
        if cell is not None:
            cells.add((cell, entry.record.attempt))  # type: ignore[union-attr]
        for address in blob_refs(entry.record):
            referenced.setdefault(address, (shard, f"{JOURNALS}/{source.name}"))
    if len({c for c, _ in cells}) > 1:
        raise _evidence(shard, f"{JOURNALS}/{source.name}", "holds records of two cells")
    return cells


def _read_run_journal(shard: _Shard, referenced: dict[str, tuple[_Shard, str]]) -> None:
    path = shard.path / JOURNALS / f"{RUN_JOURNAL}.jsonl"
    if not path.is_file():
        return  # a shard killed before it recorded its start: its attempts still stand
    for entry in _read_entries(shard, path, path):
        try:
            check_placement(RUN_JOURNAL, entry.record)
        except EvidenceError as exc:
            raise EvidenceError(f"shard {shard.path}: {exc}") from None
        record = entry.record
        if (
            isinstance(record, RunStarted)
            and record.protocol_hash != shard.protocol.identities.protocol_hash
        ):
            raise _evidence(
                shard, f"{JOURNALS}/run.jsonl", "run_started names another protocol_hash"
            )
        for address in blob_refs(record):
            referenced.setdefault(address, (shard, f"{JOURNALS}/run.jsonl"))
        shard.run_entries.append(entry)


def _write_run_journal(shards: list[_Shard], out: Path, run_id: str) -> None:
    with_records = [s for s in shards if s.run_entries]
    if not with_records:
        return
    order = sorted(
        range(len(with_records)),
        key=lambda i: (int(with_records[i].run_entries[0].at_ns), with_records[i].run_id, i),
    )
    entries = [e for i in order for e in with_records[i].run_entries]
    times = iter([int(e.at_ns) for e in entries])
    with Journal(out / JOURNALS / f"{RUN_JOURNAL}.jsonl", clock=lambda: next(times)) as j:
        for e in entries:
            record = e.record
            if isinstance(record, RunStarted):  # bound to the merged protocol.json's run id
                record = record.model_copy(update={"run_id": run_id})
            j.append(record)


def _copy_torn(shards: list[_Shard], out: Path) -> None:
    """Quarantined tails travel with their journals (each journal records its own tail's hash,
    which `bench verify` checks); the same name with other bytes in two shards is refused."""
    for shard in shards:
        for path in shard.torn:
            target = out / JOURNALS / path.name
            data = path.read_bytes()
            if target.exists():
                if target.read_bytes() == data:
                    continue
                raise _evidence(
                    shard,
                    f"{JOURNALS}/{path.name}",
                    "another shard holds a different quarantined tail of the same name",
                )
            with open(target, "xb") as fh:
                fh.write(data)


def _copy_blobs(shards: list[_Shard], out: Path, referenced: dict[str, tuple[_Shard, str]]) -> int:
    written: set[str] = set()
    for shard in shards:
        for path in shard.blobs:
            address = "sha256:" + path.name
            data = path.read_bytes()
            if sha256_digest(data) != address:
                raise _evidence(shard, f"{BLOBS}/{path.name}", "does not hash to its address")
            if address in written:
                continue
            target = out / BLOBS / path.name
            with open(target, "xb") as fh:
                fh.write(data)
            written.add(address)
    for address, (shard, rel) in sorted(referenced.items()):
        if address not in written:
            cell = _cell_of(shard.path / rel) if rel != f"{JOURNALS}/run.jsonl" else None
            raise _evidence(
                shard, rel, f"references blob {address}, which no shard holds"
                + (f" (cell {cell})" if cell else "")
            )  # fmt: skip
    return len(written)


def _copy_file(source: Path, target: Path) -> None:
    with open(source, "rb") as src, open(target, "xb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def _fsync_tree(out: Path) -> None:
    """Everything durable before the merge reports success."""
    for dirpath, _dirs, files in os.walk(out):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
