"""The strict layout of a run directory: every entry in it is expected, or `verify` refuses it.

Why: a check that only looks at the files it knows lets anything else ride along: an extra
journal (`journals/x.jsonl`), a dotfile, a `blobs/md5/` tree, a symlink to an identical copy
outside the run directory, a FIFO that makes the reader hang. So before a byte of evidence is
read, the whole tree is listed with lstat (nothing is opened, nothing followed, nothing
written) and held against this layout:

    protocol.json                        regular file
    journals/                            directory of regular files only:
      run.jsonl                            the run's own journal (not empty)
      <16 hex>-a<n>.jsonl                  one attempt's journal (`attempt.api.journal_name`)
      <journal>.jsonl.torn-<n>             a torn tail moved aside, recorded in <journal>
    blobs/sha256/<64 hex>                regular files; `blobs/` holds `sha256/` only
    results/                             optional; directories and regular files only
    signatures/                          optional (evaluator/trust/run.py): SHA256SUMS,
                                         run.dsse.json, <subject>.scorecard.dsse.json

No entry anywhere may be a symlink, a FIFO, a socket or a device, or be named with a leading dot.
Then one streamed pass over the journal lines (bounded in length, prefiltered by bytes) collects
what the journals refer to: every blob a record names (a grader report, a ledger, an environment
artifact) must exist and hash to its address, and no blob may be there that no record names;
every torn tail must be recorded, with its digest, in the journal it was cut from, and every
recorded tail must still be there; and the run's `run_started` records must name exactly the
protocol.json beside them (run id, spec text digest, spec name, identities, status), which binds
those fields into the evidence root. A journal's name is bound to its records (cell and attempt)
by `loading.check_placement` while the evaluation reads it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pydantic_core

from runner.evaluator.core.bounded import (
    BLOB_CAP,
    JOURNAL_LINE_CAP,
    PROTOCOL_CAP,
    RESULT_FILE_CAP,
    GiB,
    file_kind,
    lines_bounded,
    read_bounded,
    sha256_bounded,
)
from runner.evaluator.core.canonical import is_digest, sha256_digest
from runner.evaluator.core.errors import EvidenceError, shorten
from runner.evaluator.core.filesets import compare_sets
from runner.evaluator.protocol.runfile import PROTOCOL_FILE, RunProtocol

from .journal import BLOBS, JOURNALS
from .loading import ATTEMPT_JOURNAL
from .records import BLOB_FIELDS

RESULTS = "results"
SIGNATURES = "signatures"  # evaluator/trust/run.py (which imports publish, hence not imported)
SIGNATURE_FILE = re.compile(r"SHA256SUMS|run\.dsse\.json|[^./][^/]*\.scorecard\.dsse\.json")
SIGNATURE_CAP = 1 << 30
RUN_JOURNAL = "run"
JOURNAL_CAP = 64 * GiB  # one journal file (README "Limits")
MAX_RESULT_ENTRIES = 1_000_000  # entries under results/ (a run writes a handful per subject)
TORN = re.compile(r"(.+)\.jsonl\.torn-([1-9][0-9]*)")
HEX64 = re.compile(r"[0-9a-f]{64}")

# The bytes a canonical journal line holds exactly when a field naming a blob (BLOB_FIELDS) is
# set: a quote inside a JSON string is always escaped, so `"report":"sha256:` cannot occur inside
# a string value.
_NEEDLES = tuple(f'"{f}":"sha256:'.encode() for fs in BLOB_FIELDS.values() for f in fs)
_TAIL = b'"type":"quarantined_tail"'
_STARTED = b'"type":"run_started"'


@dataclass
class Layout:
    """What a run directory holds, listed with lstat; `problems` names every unexpected entry."""

    problems: list[str] = field(default_factory=list)
    journals: list[str] = field(default_factory=list)  # file names, sorted
    sizes: dict[str, int] = field(default_factory=dict)  # journal file name -> size (lstat)
    torn: list[str] = field(default_factory=list)
    blobs: dict[str, int] = field(default_factory=dict)  # hex -> size
    results: list[str] = field(default_factory=list)  # "results/..." regular files, sorted
    result_sizes: dict[str, int] = field(default_factory=dict)  # "results/..." -> size (lstat)
    result_dirs: list[str] = field(default_factory=list)  # "results/..." directories below it


def show(name: str) -> str:
    """A file name fit for a message: short, and escaped unless printable (a name may hold
    terminal escapes or undecodable bytes)."""
    return shorten(name if name.isprintable() else ascii(name))


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _names(path: Path, rel: str, out: Layout) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        out.problems.append(f"{rel}: cannot list ({exc.strerror})")
        return []


def _expect(path: Path, rel: str, want: str, out: Layout) -> os.stat_result | None:
    """lstat `path`; record a problem unless it is a `want` ("directory" / "regular file")."""
    st = _lstat(path)
    if st is None:
        out.problems.append(f"{rel}: missing (expected a {want})")
        return None
    kind = file_kind(st.st_mode)
    if kind != want:
        out.problems.append(f"{rel}: is a {kind}, expected a {want}")
        return None
    return st


def scan_layout(run_dir: Path, results: bool = True) -> Layout:
    """List the run directory against the layout (module docstring); reads no file.
    `results=False` leaves results/ unlisted (for `evaluate`, which replaces it whole)."""
    out = Layout()
    try:
        top = os.stat(run_dir)  # the directory named by the user may be reached by a symlink
    except (OSError, ValueError):
        top = None
    if top is None or not stat.S_ISDIR(top.st_mode):
        out.problems.append(f"{shorten(str(run_dir))}: not a directory")
        return out
    known = {PROTOCOL_FILE, JOURNALS, "blobs", RESULTS, SIGNATURES}
    for name in _names(run_dir, ".", out):
        if name not in known:
            st = _lstat(run_dir / name)
            kind = file_kind(st.st_mode) if st else "entry"
            out.problems.append(f"{show(name)}: unexpected {kind} in the run directory")
    st = _expect(run_dir / PROTOCOL_FILE, PROTOCOL_FILE, "regular file", out)
    if st is not None and st.st_size > PROTOCOL_CAP:
        out.problems.append(f"{PROTOCOL_FILE}: {st.st_size} bytes; the limit is {PROTOCOL_CAP}")
    _journals(run_dir, out)
    _blobs(run_dir, out)
    if results and _lstat(run_dir / RESULTS) is not None:
        _results(run_dir, out)
    if _lstat(run_dir / SIGNATURES) is not None:
        _signatures(run_dir, out)
    return out


def _signatures(run_dir: Path, out: Layout) -> None:
    """Only the signature files' names and types: their contents are checked by trust/."""
    if _expect(run_dir / SIGNATURES, SIGNATURES, "directory", out) is None:
        return
    for name in _names(run_dir / SIGNATURES, SIGNATURES, out):
        rel = f"{SIGNATURES}/{show(name)}"
        st = _expect(run_dir / SIGNATURES / name, rel, "regular file", out)
        if st is None:
            continue
        if SIGNATURE_FILE.fullmatch(name) is None:
            out.problems.append(f"{rel}: unexpected file (not a signature file)")
        elif st.st_size > SIGNATURE_CAP:
            out.problems.append(f"{rel}: {st.st_size} bytes; the limit is {SIGNATURE_CAP}")


def _journals(run_dir: Path, out: Layout) -> None:
    if _expect(run_dir / JOURNALS, JOURNALS, "directory", out) is None:
        return
    names = _names(run_dir / JOURNALS, JOURNALS, out)
    present = set(names)
    for name in names:
        rel = f"{JOURNALS}/{show(name)}"
        st = _expect(run_dir / JOURNALS / name, rel, "regular file", out)
        if st is None:
            continue
        torn = TORN.fullmatch(name)
        if torn is not None:
            if f"{torn[1]}.jsonl" not in present:
                out.problems.append(f"{rel}: a torn tail of no journal in {JOURNALS}/")
            else:
                out.torn.append(name)
            continue
        stem = name.removesuffix(".jsonl")
        if name == stem or (stem != RUN_JOURNAL and ATTEMPT_JOURNAL.fullmatch(stem) is None):
            out.problems.append(
                f"{rel}: unexpected file (a journal is run.jsonl or <cell prefix>-a<n>.jsonl)"
            )
        elif st.st_size > JOURNAL_CAP:
            out.problems.append(f"{rel}: {st.st_size} bytes; the limit is {JOURNAL_CAP}")
        elif st.st_size == 0:
            # A journal is created with its first record (journal.Journal): an empty one was put
            # there by hand, and could name a cell the protocol does not register.
            out.problems.append(f"{rel}: empty journal (a journal holds at least one record)")
        else:
            out.journals.append(name)
            out.sizes[name] = st.st_size


def _blobs(run_dir: Path, out: Layout) -> None:
    if _expect(run_dir / "blobs", "blobs", "directory", out) is None:
        return
    for name in _names(run_dir / "blobs", "blobs", out):
        if name != "sha256":
            out.problems.append(f"blobs/{show(name)}: unexpected entry (blobs/ holds sha256/)")
    if _expect(run_dir / BLOBS, BLOBS, "directory", out) is None:
        return
    for name in _names(run_dir / BLOBS, BLOBS, out):
        rel = f"{BLOBS}/{show(name)}"
        st = _expect(run_dir / BLOBS / name, rel, "regular file", out)
        if st is None:
            continue
        if HEX64.fullmatch(name) is None:
            out.problems.append(f"{rel}: unexpected file (a blob is named by its SHA-256 in hex)")
        elif st.st_size > BLOB_CAP:
            out.problems.append(f"{rel}: {st.st_size} bytes; the limit is {BLOB_CAP}")
        else:
            out.blobs[name] = st.st_size


def _results(run_dir: Path, out: Layout) -> None:
    if _expect(run_dir / RESULTS, RESULTS, "directory", out) is None:
        return
    stack = [PurePosixPath(RESULTS)]
    seen = 0
    while stack:
        rel = stack.pop()
        for name in _names(run_dir / rel, str(rel), out):
            seen += 1
            if seen > MAX_RESULT_ENTRIES:
                out.problems.append(f"{RESULTS}: more than {MAX_RESULT_ENTRIES} entries")
                return
            child = rel / name
            shown = show(str(child))
            st = _lstat(run_dir / child)
            if st is None:
                out.problems.append(f"{shown}: vanished while listed")
            elif name.startswith("."):
                out.problems.append(f"{shown}: unexpected {file_kind(st.st_mode)} (a dotfile)")
            elif stat.S_ISDIR(st.st_mode):
                stack.append(child)
                out.result_dirs.append(str(child))
            elif not stat.S_ISREG(st.st_mode):
                out.problems.append(f"{shown}: is a {file_kind(st.st_mode)}, expected a file")
            elif st.st_size > RESULT_FILE_CAP:
                out.problems.append(f"{shown}: {st.st_size} bytes; the limit is {RESULT_FILE_CAP}")
            else:
                out.results.append(str(child))
                out.result_sizes[str(child)] = st.st_size
    out.results.sort()


# ----------------------------------------------------------------------- what journals refer to


@dataclass
class References:
    blobs: dict[str, str] = field(default_factory=dict)  # hex -> first "journal line n" naming it
    tails: dict[str, tuple[str, str]] = field(default_factory=dict)  # torn file -> (journal, sha)
    started: list[dict[str, Any]] = field(default_factory=list)  # run_started records


def _record_of(line: bytes, where: str) -> dict[str, Any]:
    try:
        env = pydantic_core.from_json(line)
    except ValueError as exc:
        raise EvidenceError(f"{where}: not a JSON record") from exc
    record = env.get("record") if isinstance(env, dict) else None
    if not isinstance(record, dict):
        raise EvidenceError(f"{where}: not a journal envelope")
    return record


SMALL_JOURNAL = 1 << 20  # read whole (one syscall), searched once; bigger ones are streamed


def _lines(path: Path, size: int) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of the lines that can name a blob, a tail or the run's start."""
    if size <= SMALL_JOURNAL:
        data = read_bounded(path, SMALL_JOURNAL, evidence=True)
        if not any(n in data for n in (*_NEEDLES, _TAIL, _STARTED)):
            return  # the usual attempt journal: nothing to collect
        numbered: Iterable[tuple[int, bytes]] = enumerate(data.splitlines(keepends=True), 1)
    else:
        numbered = enumerate(lines_bounded(path, JOURNAL_LINE_CAP, JOURNAL_CAP), start=1)
    for n, line in numbered:
        if len(line) > JOURNAL_LINE_CAP:
            raise EvidenceError(f"{path}: line {n} is longer than {JOURNAL_LINE_CAP} bytes")
        if any(needle in line for needle in _NEEDLES) or _TAIL in line or _STARTED in line:
            yield n, line


def references(run_dir: Path, layout: Layout) -> References:
    """Blob addresses, quarantined tails and run_started records named by the journals: one
    pass over the bytes; only lines whose bytes can hold one are parsed (the evaluation checks
    every line in full)."""
    refs = References()
    for name in layout.journals:
        path = run_dir / JOURNALS / name
        for n, line in _lines(path, layout.sizes[name]):
            where = f"{JOURNALS}/{name}: line {n}"
            record = _record_of(line, where)
            kind = record.get("type")
            addresses = [record.get(f) for f in BLOB_FIELDS.get(str(kind), ())]
            for address in addresses:
                if isinstance(address, str) and is_digest(address):
                    refs.blobs.setdefault(address.removeprefix("sha256:"), where)
            if kind == "quarantined_tail":
                file, sha = record.get("file"), record.get("sha256")
                if isinstance(file, str) and isinstance(sha, str):
                    refs.tails[file] = (name, sha)
            elif kind == "run_started" and name == f"{RUN_JOURNAL}.jsonl":
                refs.started.append(record)
    return refs


def reference_problems(run_dir: Path, layout: Layout, refs: References) -> list[str]:
    """Referenced blobs present and at their address, nothing unreferenced; tails recorded."""
    problems: list[str] = []
    blobs = compare_sets(refs.blobs, layout.blobs)
    for hexname, side in blobs:  # the missing first, then what is there
        if side == "expected":
            problems.append(f"{BLOBS}/{hexname}: missing (named by {refs.blobs[hexname]})")
    for hexname, side in blobs:
        rel = f"{BLOBS}/{hexname}"
        if side == "expected":
            continue
        if side == "present":
            problems.append(f"{rel}: no journal record names this blob (unexpected file)")
            continue
        try:
            actual = sha256_bounded(run_dir / BLOBS / hexname, BLOB_CAP)
        except EvidenceError as exc:
            problems.append(str(exc))
            continue
        if actual != "sha256:" + hexname:
            problems.append(f"{rel}: does not match its address (it hashes to {actual})")
    for torn in layout.torn:
        rel = f"{JOURNALS}/{torn}"
        owner = f"{TORN.fullmatch(torn)[1]}.jsonl"  # type: ignore[index]
        recorded = refs.tails.get(torn)
        if recorded is None or recorded[0] != owner:
            problems.append(f"{rel}: quarantined bytes not recorded in its journal")
            continue
        try:
            actual = sha256_bounded(run_dir / JOURNALS / torn, JOURNAL_CAP)
        except EvidenceError as exc:
            problems.append(str(exc))
            continue
        if actual != recorded[1]:
            problems.append(f"{rel}: quarantined bytes differ from the digest its journal records")
    for file, (journal, _) in sorted(refs.tails.items()):
        if file not in layout.torn:
            problems.append(
                f"{JOURNALS}/{show(file)}: missing (a quarantined tail {JOURNALS}/{journal} "
                "records)"
            )
    return problems


def run_record_problems(rp: RunProtocol, started: list[dict[str, Any]]) -> list[str]:
    """The run journal's run_started records name exactly this protocol.json: its run id, its
    spec text (by digest) and spec name, its identities and its frozen/draft status."""
    problems: list[str] = []
    want = {
        "run_id": rp.run_id,
        "spec_digest": sha256_digest(rp.spec_text.encode()),
        "protocol_hash": rp.identities.protocol_hash,
        "identities": rp.identities.model_dump(mode="json"),
        "protocol_status": "frozen" if rp.freeze_record is not None else "draft",
    }
    for n, record in enumerate(started, start=1):
        for key, value in want.items():
            if record.get(key) != value:
                problems.append(
                    f"{PROTOCOL_FILE}: {key} differs from the run's run_started record {n} "
                    f"({JOURNALS}/{RUN_JOURNAL}.jsonl)"
                )
        spec_path = record.get("spec_path")
        if not isinstance(spec_path, str) or PurePosixPath(spec_path).name != rp.spec_name:
            problems.append(
                f"{PROTOCOL_FILE}: spec_name differs from the run's run_started record {n} "
                f"({JOURNALS}/{RUN_JOURNAL}.jsonl)"
            )
    return problems


def check(run_dir: Path, results: bool = True) -> tuple[Layout, References | None, list[str]]:
    """The layout and its problems, then (when the layout holds) the references' problems."""
    layout = scan_layout(run_dir, results)
    if layout.problems:
        return layout, None, layout.problems
    try:
        refs = references(run_dir, layout)
    except EvidenceError as exc:
        return layout, None, [str(exc)]
    return layout, refs, reference_problems(run_dir, layout, refs)


def require(run_dir: Path) -> None:
    """Raise EvidenceError naming the first problem of the evidence's layout and references
    (results/ aside): what `evaluate` needs before it opens a journal."""
    _, _, problems = check(run_dir, results=False)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise EvidenceError(problems[0] + more)


def open_run(run_dir: Path, results: bool = True) -> tuple[Layout, References]:
    """The one entry of every command that reads a run directory or a bundle (verify, evaluate,
    reproduce, regrade, report, compare, merge, registry add): the lstat-only layout check, each
    file's type and stat size against its cap, then the bounded scan of what the journals refer
    to (blobs hashed to their address). Runs before any signature is checked and before any file
    is parsed; reads through no symlink and writes nothing. EvidenceError naming the first
    problem (and how many more)."""
    layout, refs, problems = check(run_dir, results)
    if problems or refs is None:
        first = problems[0] if problems else f"{shorten(str(run_dir))}: unreadable"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise EvidenceError(first + more)
    return layout, refs
