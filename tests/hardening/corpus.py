"""The hostile corpus (issue 29): every way a run directory or bundle was broken on purpose, kept
as code so each case is made afresh on a copy of a real evaluated, signed synthetic run.

A case is a name, what it does to the run directory (`apply(run, outside)`, `outside` a directory
beside it that the run must never write into either), and its scope, which says who must refuse it:

- "layout": the layout, sizes, references or protocol.json (`layout.open_run`, the entry of every
  reading command): every reading command refuses it before reading further;
- "journal": a journal's bytes (a broken line, records out of order): every command that reads
  the journals refuses it (all but `report --junit`, which is drawn from results/ alone);
- "evidence": a well-formed journal whose evidence no longer derives the published results:
  the commands that check published results against the evidence (verify, reproduce, compare,
  registry add); evaluate, regrade and merge take it as evidence (their job), report shows it;
- "results": a published result: the same four;
- "views": report.html or junit.xml: verify and reproduce, which re-render them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.evaluator.core.bounded import GiB, MiB
from runner.evaluator.evidence.journal import Journal, read_journal


@dataclass(frozen=True)
class Case:
    name: str
    apply: Callable[[Path, Path], object]
    scope: str = "layout"  # module docstring


def _attempts(run: Path) -> list[Path]:
    return sorted(p for p in (run / "journals").iterdir() if p.name != "run.jsonl")


def _fifo(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


def _sparse(path: Path, size: int) -> None:
    if path.exists():
        path.unlink()
    with open(path, "wb") as fh:
        fh.truncate(size)


def _card(run: Path) -> Path:
    return sorted((run / "results").glob("*/scorecard.json"))[0]


def _cell_scores(run: Path) -> Path:
    return sorted((run / "results").glob("*/cell-scores.jsonl"))[0]


def _flip_byte(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] = ord("0") if data[i] != ord("0") else ord("1")
    path.write_bytes(bytes(data))


def _invalid_json_line(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0] = b'{"not": json\n'
    path.write_bytes(b"".join(lines))


def _rechained(path: Path, order: Callable[[list], list]) -> None:
    """The journal's records in another order (or repeated), chain and seq recomputed, each
    with its recorded at_ns: what an editor without the signing key can do."""
    entries = order(list(read_journal(path)))
    times = iter(int(e.at_ns) for e in entries)
    path.unlink()
    with Journal(path, clock=lambda: next(times)) as j:
        for e in entries:
            j.append(e.record)


def _reorder(run: Path, _: Path) -> None:
    journal = max(_attempts(run), key=lambda p: p.stat().st_size)
    _rechained(journal, lambda es: [es[0], *reversed(es[1:-1]), es[-1]])


def _duplicate(run: Path, _: Path) -> None:
    journal = max(_attempts(run), key=lambda p: p.stat().st_size)
    _rechained(journal, lambda es: [*es[:-1], es[-2], es[-1]])


def _blobs_symlink_out(run: Path, outside: Path) -> None:
    empty = outside / "empty"
    empty.mkdir()
    for p in (run / "blobs" / "sha256").iterdir():
        p.unlink()
    (run / "blobs" / "sha256").rmdir()
    (run / "blobs").rmdir()
    (run / "blobs").symlink_to(empty)


def _journals_missing(run: Path, outside: Path) -> None:
    os.rename(run / "journals", outside / "journals")


def _journal_symlink_in(run: Path, outside: Path) -> None:
    journal = _attempts(run)[0]
    copy = outside / journal.name
    copy.write_bytes(journal.read_bytes())
    journal.unlink()
    journal.symlink_to(copy)


def _result_symlink_out(run: Path, outside: Path) -> None:
    card = _card(run)
    copy = outside / "scorecard.json"
    copy.write_bytes(card.read_bytes())
    card.unlink()
    card.symlink_to(copy)


def _protocol_symlink_in(run: Path, _: Path) -> None:
    os.rename(run / "protocol.json", run / "journals" / "protocol.json")
    (run / "protocol.json").symlink_to("journals/protocol.json")


def _missing_blob(run: Path, _: Path) -> None:
    next((run / "blobs" / "sha256").iterdir()).unlink()


def _oversized_value(path: Path) -> None:
    """A scorecard whose one string is 8 MiB: well-formed JSON, far from what was derived."""
    data = path.read_bytes()
    path.write_bytes(data[:-2] + b',"zz":"' + b"x" * (8 * MiB) + b'"}\n')


def _utf16_card(run: Path, _: Path) -> None:
    card = _card(run)
    card.write_bytes(card.read_bytes().decode().encode("utf-16"))


def _edit_view(name: str) -> Callable[[Path, Path], None]:
    def apply(run: Path, _: Path) -> None:
        path = run / "results" / name
        path.write_bytes(path.read_bytes().replace(b"COMPLETED", b"C0MPLETED", 1) + b" ")

    return apply


def _unrecorded_tail(run: Path, _: Path) -> None:
    journal = _attempts(run)[0]
    (journal.parent / f"{journal.name}.torn-1").write_bytes(b'{"at_ns":"1"')


def _extra_blob(run: Path, _: Path) -> None:
    data = b"unreferenced"
    (run / "blobs" / "sha256" / hashlib.sha256(data).hexdigest()).write_bytes(data)


def _device(run: Path, _: Path) -> None:
    os.mknod(run / "journals" / "0123456789abcdef-a1.jsonl", stat.S_IFCHR | 0o600, os.makedev(1, 3))


CASES: list[Case] = [
    Case("fifo in place of a journal", lambda r, o: _fifo(_attempts(r)[0])),
    Case("extra fifo journal", lambda r, o: _fifo(r / "journals" / "0123456789abcdef-a1.jsonl")),
    Case("fifo in place of protocol.json", lambda r, o: _fifo(r / "protocol.json")),
    Case("fifo in results", lambda r, o: _fifo(r / "results" / "extra.json")),
    Case("character device journal", _device),
    Case("journals missing", _journals_missing),
    Case("protocol.json missing", lambda r, o: (r / "protocol.json").unlink()),
    Case("blobs a symlink to an empty dir outside", _blobs_symlink_out),
    Case("journal a symlink to a copy outside", _journal_symlink_in),
    Case("protocol.json a symlink inside", _protocol_symlink_in),
    Case("scorecard a symlink to a copy outside", _result_symlink_out),
    Case("sparse 256 MiB protocol.json", lambda r, o: _sparse(r / "protocol.json", 256 * MiB)),
    Case(
        "sparse 2 GiB extra file in results",
        lambda r, o: _sparse(r / "results" / "x", 2 * GiB),
        "results",
    ),
    Case(
        "sparse 3 GiB extra file in results",
        lambda r, o: _sparse(r / "results" / "big.json", 3 * GiB),
    ),
    Case("sparse 2 GiB blob", lambda r, o: _sparse(r / "blobs" / "sha256" / ("0" * 64), 2 * GiB)),
    Case("invalid JSON protocol.json", lambda r, o: (r / "protocol.json").write_bytes(b'{"x":')),
    Case(
        "empty journal for no cell",
        lambda r, o: (r / "journals" / "fedcba9876543210-a1.jsonl").write_bytes(b""),
    ),
    Case("empty journal of a real cell", lambda r, o: _attempts(r)[0].write_bytes(b"")),
    Case("records reordered, chain recomputed", _reorder, "journal"),
    Case("record duplicated, chain recomputed", _duplicate, "evidence"),
    Case("missing blob", _missing_blob),
    Case("unreferenced blob", _extra_blob),
    Case("unrecorded torn tail", _unrecorded_tail),
    Case("top-level dotfile", lambda r, o: (r / ".notes").write_text("x")),
    Case("extra top-level directory", lambda r, o: (r / "destination").mkdir()),
    Case("journal line invalid JSON", lambda r, o: _invalid_json_line(_attempts(r)[0]), "journal"),
    Case("byte flipped in cell-scores.jsonl", lambda r, o: _flip_byte(_cell_scores(r)), "results"),
    Case(
        "cell-scores.jsonl line invalid JSON",
        lambda r, o: _invalid_json_line(_cell_scores(r)),
        "results",
    ),
    Case("scorecard with an 8 MiB value", lambda r, o: _oversized_value(_card(r)), "results"),
    Case("scorecard in UTF-16", _utf16_card, "results"),
    Case(
        "extra file in results",
        lambda r, o: (r / "results" / "notes.txt").write_text("x"),
        "results",
    ),
    Case("report.html edited", _edit_view("report.html"), "views"),
    Case("junit.xml edited", _edit_view("junit.xml"), "views"),
]


def listing(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under root, not following symlinks: mode, size, mtime and (regular files
    under 64 MiB) a digest of the bytes: "byte-identical afterwards" is checked, not assumed."""
    out: dict[str, tuple[int, int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath) / name if name != "." else Path(dirpath)
            st = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st.st_mode) and st.st_size < 64 * MiB:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(p)
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out
