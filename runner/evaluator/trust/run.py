"""What a run's signature covers, and checking it: every file of the run directory, by SHA-256.

A signed run directory holds `signatures/`:

- `SHA256SUMS`: one line `<sha256 hex>  <path>` per regular file of the run directory (protocol,
  journals, blobs, results), sorted by path; `sha256sum -c` reads it. Not listed: `signatures/`
  itself and the two derived views (results/report.html, junit.xml), which `bench report`
  rebuilds and nothing binds.
- `run.dsse.json`: a DSSE envelope over an in-toto Statement whose subject is SHA256SUMS and whose
  predicate (`RunPredicate`) names the protocol, the evaluator that judged the results and the
  evidence root the proofs commit to.
- `<subject>.scorecard.dsse.json`: a DSSE envelope over each scorecard's own in-toto Statement
  (results/<subject>/scorecard.intoto.json, publish/attest.py), byte for byte.

The manifest is independent of the evaluator version: a bundle judged by an older evaluator is
checked the same way. A file added, removed or changed after signing is named.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError
from securesystemslib.signer import Key  # type: ignore[attr-defined]  # public, no __all__

from runner.evaluator.core.bounded import sha256_bounded
from runner.evaluator.core.filesets import compare_sets
from runner.evaluator.core.types import Digest, Frozen
from runner.evaluator.publish.attest import FILE_NAME as STATEMENT_FILE
from runner.evaluator.publish.attest import PREDICATE_TYPE as SCORECARD_PREDICATE
from runner.evaluator.publish.results import DERIVED_VIEWS, RESULTS

from .envelope import TrustError, open_statement_keys, read_bounded, subject_sha256
from .window import SIGNED_AT_PATTERN, SignedTime, check_window, exact, latest_journal_time

SIGNATURES = "signatures"
MANIFEST = f"{SIGNATURES}/SHA256SUMS"
RUN_ENVELOPE = f"{SIGNATURES}/run.dsse.json"
RUN_PREDICATE = "urn:agent-fault-bench:predicate:run-signature:v1"
MAX_MANIFEST_BYTES = 1 << 30
MAX_FILE_BYTES = 64 << 30  # one file of a run (a journal may be this large: README "Limits")


def scorecard_envelope(subject: str) -> str:
    return f"{SIGNATURES}/{subject}.scorecard.dsse.json"


class RunPredicate(Frozen):
    """What the run's signer vouches for, besides the bytes of every file."""

    protocol_id: str
    protocol_hash: Digest
    evaluator_digest: Digest  # the evaluator whose results the directory holds
    evidence_root_hash: Digest  # the root every proof (and scorecard) of the run commits to
    files: int  # lines in SHA256SUMS
    # when it was signed (UTC), held against the signing key's validity window (window.py);
    # absent in signatures made before windows existed
    signed_at: Annotated[str, Field(pattern=SIGNED_AT_PATTERN)] | None = None


def _walk(root: Path, rel: str = "") -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every regular file below `root`; anything else is refused."""
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        name = f"{rel}{e.name}"
        if name == SIGNATURES or name in DERIVED_VIEWS:
            continue
        if "\n" in name or "\\" in name or not name.isprintable() or _undecodable(name):
            raise TrustError(f"{name!r}: a file name that cannot be listed in a manifest")
        mode = e.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            yield from _walk(Path(e.path), name + "/")
        elif stat.S_ISREG(mode):
            yield name, Path(e.path)
        else:
            raise TrustError(f"{name}: not a regular file or directory (symlink, FIFO, ...)")


def _undecodable(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:  # bytes that are not UTF-8 (surrogate-escaped by os.scandir)
        return True
    return False


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a regular file, streamed; never opened if it is not one (a FIFO swapped
    in after listing is refused, not waited on)."""
    return sha256_bounded(path, MAX_FILE_BYTES, evidence=True)[len("sha256:") :]


def manifest(run_dir: Path) -> bytes:
    """SHA256SUMS of the run directory as it is now."""
    return b"".join(f"{file_sha256(p)}  {rel}\n".encode() for rel, p in sorted(_walk(run_dir)))


def parse_manifest(data: bytes, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        sha, sep, rel = line.partition("  ")
        if not sep or len(sha) != 64 or rel in out:
            raise TrustError(f"{where}: line {n} is not `<sha256>  <path>` (or repeats a path)")
        out[rel] = sha
    return out


def run_statement(manifest_bytes: bytes, predicate: RunPredicate) -> dict[str, Any]:
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [
            {"name": "SHA256SUMS", "digest": {"sha256": hashlib.sha256(manifest_bytes).hexdigest()}}
        ],
        "predicateType": RUN_PREDICATE,
        "predicate": predicate.model_dump(mode="json"),
    }


def check_run(run_dir: Path, trusted: Mapping[str, Key]) -> RunPredicate:
    """The run's signed predicate, once a trusted key's signature verifies over the manifest
    and every file of the directory is the one listed; TrustError naming the first difference."""
    _, st, keys = open_statement_keys(
        run_dir / RUN_ENVELOPE, trusted, RUN_PREDICATE, "the run's signature"
    )
    where = str(run_dir / RUN_ENVELOPE)
    signed = subject_sha256(st, where)
    data = read_bounded(run_dir / MANIFEST, MAX_MANIFEST_BYTES, "the signed file list")
    if signed.get("SHA256SUMS") != hashlib.sha256(data).hexdigest():
        raise TrustError(f"{run_dir / MANIFEST}: not the file list the signature covers")
    try:
        predicate = RunPredicate.model_validate(st.get("predicate"))
    except ValidationError as exc:
        raise TrustError(
            f"{where}: not a run-signature predicate: {exc.errors()[0]['msg']}"
        ) from exc
    listed = parse_manifest(data, str(run_dir / MANIFEST))
    actual = dict(_walk(run_dir))
    problems: list[str] = []
    for rel, side in compare_sets(listed, actual):
        if side == "expected":
            problems.append(f"{rel}: signed but missing")
        elif side == "present":
            problems.append(f"{rel}: not signed (added after signing)")
        elif file_sha256(actual[rel]) != listed[rel]:
            problems.append(f"{rel}: changed since it was signed")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TrustError(f"{run_dir}: {problems[0]}{more}")
    check_window(keys, signed_time(run_dir, predicate), where)
    return predicate


def signed_time(run_dir: Path, run: RunPredicate) -> SignedTime:
    """When the run was signed: its `signed_at`, else (older signatures) at least the latest
    time its signed journals record. Call once its files are the signed ones (check_run)."""
    if run.signed_at is not None:
        return exact(run.signed_at, "signed_at of the run's signature")
    journals = sorted((run_dir / "journals").glob("*.jsonl"))
    got = latest_journal_time(journals, "the latest at_ns of its signed journals")
    if got is None:
        raise TrustError(
            f"{run_dir}: its signature carries no signed_at and its journals record no time: "
            "no signed time to hold against the key's window"
        )
    return got


def check_scorecard(
    run_dir: Path, subject: str, trusted: Mapping[str, Key], run: RunPredicate
) -> None:
    """The scorecard's own signed Statement: signed by a trusted key, naming this scorecard's
    bytes and this run's evidence root (its binding to the bundle's evidence).

    Call after `check_run`: a scorecard an older evaluator wrote without a statement (before
    publish/attest.py) is then covered by the run's signature alone, since every file is."""
    env = run_dir / scorecard_envelope(subject)
    base = run_dir / RESULTS / subject
    if not (base / STATEMENT_FILE).exists() and not env.exists():
        return
    payload, st, keys = open_statement_keys(
        env, trusted, SCORECARD_PREDICATE, "the scorecard's signature"
    )
    # signed together with the run (sign_results): judged at the run's signed time
    check_window(keys, signed_time(run_dir, run), str(env))
    card = read_bounded(base / "scorecard.json", MAX_MANIFEST_BYTES, "the scorecard")
    names = subject_sha256(st, str(env))
    if names.get(f"{RESULTS}/{subject}/scorecard.json") != hashlib.sha256(card).hexdigest():
        raise TrustError(f"{env}: signs another scorecard than {RESULTS}/{subject}/scorecard.json")
    predicate = st.get("predicate")
    root = predicate.get("evidence_root_hash") if isinstance(predicate, dict) else None
    if root != run.evidence_root_hash:
        raise TrustError(f"{env}: bound to evidence root {str(root)[:80]}, not the run's "
                         f"{run.evidence_root_hash}")  # fmt: skip
    statement = read_bounded(base / STATEMENT_FILE, MAX_MANIFEST_BYTES, "the scorecard statement")
    if payload != statement:
        raise TrustError(f"{env}: the signed statement is not {RESULTS}/{subject}/{STATEMENT_FILE}")


def signature_problem(run_dir: Path, trusted: Mapping[str, Key]) -> str | None:
    """Why the run's signatures do not hold (None: the run and every scorecard are signed by a
    trusted key and every file is the one signed). What `verify` and `reproduce` ask."""
    try:
        run = check_run(run_dir, trusted)
        for card in sorted((run_dir / RESULTS).glob("*/scorecard.json")):
            check_scorecard(run_dir, card.parent.name, trusted, run)
    except TrustError as exc:
        return str(exc)
    return None
