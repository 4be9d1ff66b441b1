"""A run directory holds exactly what its layout names (evidence/layout.py): anything else, and
any reference the journals make that does not hold, makes `bench verify` exit 3 naming the path,
before any file is read, without following a symlink or blocking on a FIFO, and without writing.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.evaluator.core.bounded import read_bounded
from runner.evaluator.core.canonical import canonical_bytes, parse_json
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.journal import EvidenceStore, read_journal
from runner.evaluator.evidence.layout import check as check_layout
from runner.evaluator.evidence.layout import scan_layout
from runner.evaluator.protocol.freeze import FreezeRecord
from runner.evaluator.publish.results import verify
from tests.foundation.helpers import bench
from tests.hardening.runs import copy_run, evaluated


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layout")
    return evaluated(root / "run", lambda i, s: "duplicate" if i % 3 == 0 else "completed").run_dir


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    return copy_run(pristine, tmp_path / "run")


def _attempts(run: Path) -> list[Path]:
    return sorted(p for p in (run / "journals").iterdir() if p.name != "run.jsonl")


def _blob(run: Path) -> Path:
    return next((run / "blobs" / "sha256").iterdir())


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def _journals_a_file(run: Path) -> None:
    for p in [*_attempts(run), run / "journals" / "run.jsonl"]:
        p.unlink()
    (run / "journals").rmdir()
    (run / "journals").write_text("")


def _identical_copy_symlink(run: Path, rel: str) -> None:
    outside = run.parent / ("outside-" + rel.replace("/", "_"))
    (run / rel).rename(outside)
    (run / rel).symlink_to(outside)


def _protocol_hash(run: Path) -> str:
    return str(parse_json((run / "protocol.json").read_bytes())["identities"]["protocol_hash"])


def _rewrite_json(path: Path, edit: Callable[[dict], None]) -> None:
    value = parse_json(path.read_bytes())
    edit(value)
    path.write_bytes(canonical_bytes(value))


def _resealed(run: Path, **update: object) -> None:
    """Edit the freeze record and seal it again, as a forger would."""

    def edit(v: dict) -> None:
        rec = FreezeRecord.model_validate(v["freeze_record"]).model_copy(update=update)
        v["freeze_record"] = rec.sealed().model_dump(mode="json")

    _rewrite_json(run / "protocol.json", edit)


# (mutation, the path the first problem must name)
MUTATIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    "extra top-level file": (lambda r: (r / "notes.txt").write_text("x"), "notes.txt"),
    "file named differs": (lambda r: (r / "differs").write_text("x"), "differs"),
    "top-level dotfile": (lambda r: (r / ".hidden").write_text("x"), ".hidden"),
    "leftover results tmp": (lambda r: (r / ".results.tmp-1").mkdir(), ".results.tmp-1"),
    "leftover destination": (lambda r: (r / "destination").mkdir(), "destination"),
    "empty unknown journal": (
        lambda r: (r / "journals" / "x.jsonl").write_text(""),
        "journals/x.jsonl",
    ),
    "journal dotfile": (
        lambda r: (r / "journals" / ".x.jsonl").write_text(""),
        "journals/.x.jsonl",
    ),
    "journal not jsonl": (lambda r: (r / "journals" / "notes").write_text(""), "journals/notes"),
    "empty run journal": (
        lambda r: (r / "journals" / "run.jsonl").write_text(""),
        "journals/run.jsonl",
    ),
    "journals a file": (_journals_a_file, "journals"),
    "journals missing": (lambda r: os.rename(r / "journals", r.parent / "j"), "journals"),
    "dangling journal symlink": (
        lambda r: (r / "journals" / "0123456789abcdef-a1.jsonl").symlink_to("/nonexistent"),
        "journals/0123456789abcdef-a1.jsonl",
    ),
    "journal symlink to an identical copy": (
        lambda r: _identical_copy_symlink(r, "journals/" + _attempts(r)[0].name),
        "journals/",
    ),
    "journal fifo": (
        lambda r: _fifo(r / "journals" / "0123456789abcdef-a1.jsonl"),
        "journals/0123456789abcdef-a1.jsonl",
    ),
    "journal socket": (
        lambda r: _socket(r / "journals" / "0123456789abcdef-a2.jsonl"),
        "journals/0123456789abcdef-a2.jsonl",
    ),
    "journal directory": (
        lambda r: (r / "journals" / "0123456789abcdef-a3.jsonl").mkdir(),
        "journals/0123456789abcdef-a3.jsonl",
    ),
    "unrecorded torn tail": (
        lambda r: (r / "journals" / (_attempts(r)[0].name + ".torn-1")).write_text("{"),
        ".torn-1",
    ),
    "torn tail of no journal": (
        lambda r: (r / "journals" / "fedcba9876543210-a1.jsonl.torn-1").write_text("{"),
        "fedcba9876543210-a1.jsonl.torn-1",
    ),
    "protocol symlink to an identical copy": (
        lambda r: _identical_copy_symlink(r, "protocol.json"),
        "protocol.json",
    ),
    "protocol fifo": (
        lambda r: (os.unlink(r / "protocol.json"), _fifo(r / "protocol.json")),
        "protocol.json",
    ),
    "blobs/md5": (lambda r: (r / "blobs" / "md5").mkdir(), "blobs/md5"),
    "blob of another name": (
        lambda r: (r / "blobs" / "sha256" / "x").write_text("x"),
        "blobs/sha256/x",
    ),
    "blob dotfile (leftover tmp)": (
        lambda r: (r / "blobs" / "sha256" / ".a.1.2.tmp").write_text("x"),
        ".a.1.2.tmp",
    ),
    "unreferenced blob": (
        lambda r: EvidenceStore(r).put_blob(b"nobody names me"),
        "blobs/sha256/",
    ),
    "referenced blob deleted": (lambda r: _blob(r).unlink(), "blobs/sha256/"),
    "referenced blob replaced": (lambda r: _blob(r).write_bytes(b"{}"), "blobs/sha256/"),
    "blob symlink to an identical copy": (
        lambda r: _identical_copy_symlink(r, "blobs/sha256/" + _blob(r).name),
        "blobs/sha256/",
    ),
    "blob fifo": (
        lambda r: (_blob(r).unlink(), _fifo(r / "blobs" / "sha256" / ("0" * 64))),
        "blobs/sha256/" + "0" * 64,
    ),
    "results symlink to an identical copy": (
        lambda r: _identical_copy_symlink(r, "results/a/proof.json"),
        "results/a/proof.json",
    ),
    "results dotfile": (lambda r: (r / "results" / ".x").write_text(""), "results/.x"),
    "results extra file": (
        lambda r: (r / "results" / "a" / "notes.txt").write_text(""),
        "results/a/notes.txt",
    ),
    "results fifo": (
        lambda r: _fifo(r / "results" / "a" / "scorecard.md.fifo"),
        "results/a/scorecard.md.fifo",
    ),
    "results a symlink": (lambda r: _identical_copy_symlink(r, "results"), "results"),
    "results view a fifo": (lambda r: _fifo(r / "results" / "report.html"), "results/report.html"),
    "protocol run_id edited": (
        lambda r: _rewrite_json(r / "protocol.json", lambda v: v.update(run_id="other")),
        "run_id",
    ),
    "protocol spec_name edited": (
        lambda r: _rewrite_json(r / "protocol.json", lambda v: v.update(spec_name="x.toml")),
        "spec_name",
    ),
    "protocol spec_text comment added": (
        lambda r: _rewrite_json(
            r / "protocol.json", lambda v: v.update(spec_text=v["spec_text"] + "# edited\n")
        ),
        "spec_digest",
    ),
    "protocol schema_version edited": (
        lambda r: _rewrite_json(r / "protocol.json", lambda v: v.update(schema_version="x")),
        "schema_version",
    ),
    "freeze record reason edited": (
        lambda r: _rewrite_json(
            r / "protocol.json", lambda v: v["freeze_record"].update(reason="other")
        ),
        "freeze record",
    ),
    "freeze record resealed as an amendment without parent": (
        lambda r: _resealed(r, type="amendment"),
        "impossible parent",
    ),
    "freeze record resealed with its own hash as parent": (
        lambda r: _resealed(r, parent_protocol_hash=_protocol_hash(r)),
        "impossible parent",
    ),
    "freeze record dropped": (
        lambda r: _rewrite_json(r / "protocol.json", lambda v: v.update(freeze_record=None)),
        "protocol_status",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_unexpected_entries_and_broken_references_fail_verify_naming_the_path(
    run: Path, name: str
) -> None:
    mutate, names = MUTATIONS[name]
    res = bench("verify", run)
    assert res.exit_code == 0, res.output  # negative first: the untouched copy verifies
    mutate(run)
    problems = verify(run, evaluator_digest())
    assert problems and names in problems[0], problems
    res = bench("verify", run)
    assert res.exit_code == 3, res.output
    assert "verify failed" in res.output and "Traceback" not in res.output
    first = res.output.split("verify failed:", 1)[1].splitlines()[0]
    assert names in first, first


def _renamed(run: Path) -> None:
    a, b = _attempts(run)[:2]
    a.rename(a.with_name(b.name.replace("-a1", "-a2")))


def _swapped(run: Path) -> None:
    a, b = _attempts(run)[:2]
    tmp = a.with_name("tmp")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def _merged(run: Path) -> None:
    """Two journals merged into one with the hash chain recomputed: well-formed, misplaced."""
    a, b = _attempts(run)[:2]
    records = [e.record for e in read_journal(a)] + [e.record for e in read_journal(b)]
    a.unlink()
    b.unlink()
    with EvidenceStore(run).journal(a.stem) as j:
        for rec in records:
            j.append(rec)


def _run_journal_as_attempt(run: Path) -> None:
    a = _attempts(run)[0]
    a.unlink()
    (run / "journals" / "run.jsonl").rename(a)


@pytest.mark.parametrize("move", [_renamed, _swapped, _merged, _run_journal_as_attempt])
def test_journal_names_are_bound_to_their_records(run: Path, move: Callable[[Path], None]) -> None:
    move(run)
    res = bench("verify", run)
    assert res.exit_code == 3, res.output
    assert "journal" in res.output and "Traceback" not in res.output


def _listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under root (not following symlinks): mode, size, mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    st = os.lstat(root)
    out["."] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize(
    "damage",
    ["none", "no blobs dir", "blobs a symlink to an empty dir outside", "no journals dir"],
)
def test_verify_never_writes_inside_or_outside_the_run_directory(
    run: Path, tmp_path: Path, damage: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    if damage == "no blobs dir":
        for p in (run / "blobs" / "sha256").iterdir():
            p.unlink()
        (run / "blobs" / "sha256").rmdir()
        (run / "blobs").rmdir()
    elif damage == "blobs a symlink to an empty dir outside":
        for p in (run / "blobs" / "sha256").iterdir():
            p.unlink()
        (run / "blobs" / "sha256").rmdir()
        (run / "blobs").rmdir()
        (run / "blobs").symlink_to(outside)
    elif damage == "no journals dir":
        for p in (run / "journals").iterdir():
            p.unlink()
        (run / "journals").rmdir()
    link = tmp_path / "link"
    link.symlink_to(run)  # verified through a symlink to the run directory, too
    before = _listing(tmp_path)
    for target in (run, link):
        res = bench("verify", target)
        assert res.exit_code == (0 if damage == "none" else 3), res.output
    assert _listing(tmp_path) == before


def test_verify_of_a_read_only_run_directory(run: Path) -> None:
    """Read-only modes (root bypasses them, so the listing check above is the proof for root)."""
    for dirpath, _, filenames in os.walk(run):
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o444)
        os.chmod(dirpath, 0o555)
    try:
        assert bench("verify", run).exit_code == 0
    finally:
        for dirpath, _, _ in os.walk(run):
            os.chmod(dirpath, 0o755)


def test_bounded_reads_refuse_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "sparse"
    with open(big, "wb") as fh:
        fh.truncate(2 << 30)  # 2 GiB, sparse: refused by its size, not read
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "sparse")
    for path, says in ((fifo, "FIFO"), (big, "limit"), (link, "symlink")):
        with pytest.raises(EvidenceError, match=says):
            read_bounded(path, 1 << 20, evidence=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


PUBLISHED = sorted((Path(__file__).resolve().parents[2] / "vectors" / "published").iterdir())[-1]


def _named_by(run: Path, field: str) -> str:
    """The hex address of a blob a journal record names in `field` (a real run's evidence)."""
    for path in sorted((run / "journals").iterdir()):
        for entry in read_journal(path):
            address = getattr(entry.record, field, None)
            if address:
                return str(address).removeprefix("sha256:")
    raise AssertionError(f"no record names a {field} blob")


@pytest.mark.parametrize("field", ["report", "ledger", "artifact"])
@pytest.mark.parametrize("damage", ["deleted", "replaced", "symlinked to an identical copy"])
def test_every_blob_a_real_runs_journals_name_is_checked(
    tmp_path: Path, field: str, damage: str
) -> None:
    """On a copy of the newest published bundle (a real run): grader reports, ledgers and the
    environment artifact. The layout check runs before any result is derived, so it holds
    whichever evaluator made the bundle."""
    run = copy_run(PUBLISHED, tmp_path / "bundle")
    assert check_layout(run)[2] == []
    blob = run / "blobs" / "sha256" / _named_by(run, field)
    if damage == "deleted":
        blob.unlink()
    elif damage == "replaced":
        blob.write_bytes(blob.read_bytes() + b" ")
    else:
        _identical_copy_symlink(run, str(blob.relative_to(run)))
    problems = check_layout(run)[2]
    assert problems and blob.name in problems[0], problems


def test_signature_files_are_expected_and_nothing_else_beside_them(run: Path) -> None:
    sig = run / "signatures"
    sig.mkdir(exist_ok=True)  # the session key signed the run (tests/conftest.py): start empty
    for old in sig.iterdir():
        old.unlink()
    for name in ("SHA256SUMS", "run.dsse.json", "a.scorecard.dsse.json"):
        (sig / name).write_text("{}")
    assert scan_layout(run).problems == []
    (sig / "notes.txt").write_text("")
    os.mkfifo(sig / "b.scorecard.dsse.json")
    problems = scan_layout(run).problems
    assert any("signatures/notes.txt" in p for p in problems)
    assert any("signatures/b.scorecard.dsse.json" in p and "FIFO" in p for p in problems)


def _verify_read_only(run: Path, mountpoint: Path) -> subprocess.CompletedProcess[str]:
    """`bench verify` of `run` bind-mounted read-only, in a private mount namespace."""
    mountpoint.mkdir()
    script = (
        f'mount --bind "{run}" "{mountpoint}" && mount -o remount,ro,bind "{mountpoint}" && '
        f'exec "{sys.executable}" -m runner.cli.main verify "{mountpoint}"'
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private mount namespace")
def test_verify_on_a_read_only_bind_mount(run: Path, tmp_path: Path) -> None:
    res = _verify_read_only(run, tmp_path / "ro")
    assert res.returncode == 0, res.stderr
    for p in (run / "blobs" / "sha256").iterdir():  # a layout that once made verify mkdir
        p.unlink()
    (run / "blobs" / "sha256").rmdir()
    res = _verify_read_only(run, tmp_path / "ro2")
    assert res.returncode == 3, res.stderr
    assert "blobs/sha256: missing" in res.stderr and "Read-only" not in res.stderr
