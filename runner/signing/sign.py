"""Sign what a run produced (its files, its evidence root, each scorecard's statement) and the
heads of the append-only logs. The layout and what each signature covers: runner/evaluator/trust/
run.py and head.py, which verify them.

`sign_results(run_dir, signer)` is called once the results are written (`bench run`, `bench
evaluate`); `bench keys sign RUN_DIR` signs an evaluated run that verifies.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.signer import Signer

from runner.evaluator.core.bounded import read_bounded
from runner.evaluator.core.canonical import canonical_bytes, parse_json
from runner.evaluator.core.errors import EvidenceError, InputError
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.publish.attest import FILE_NAME as STATEMENT_FILE
from runner.evaluator.publish.results import RESULTS, judging_evaluator
from runner.evaluator.trust.envelope import PAYLOAD_TYPE
from runner.evaluator.trust.head import MAX_LOG_BYTES, head_path, head_statement
from runner.evaluator.trust.run import (
    MANIFEST,
    RUN_ENVELOPE,
    SIGNATURES,
    RunPredicate,
    manifest,
    run_statement,
    scorecard_envelope,
)
from runner.evaluator.trust.window import now_signed_at


def envelope(payload: bytes, signer: Signer) -> bytes:
    """A DSSE envelope over `payload` (an in-toto Statement's bytes), signed by `signer`."""
    env = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    env.sign(signer)
    return canonical_bytes(env.to_dict()) + b"\n"


def _statement_bytes(st: dict[str, Any]) -> bytes:
    return canonical_bytes(st) + b"\n"


def evidence_root(run_dir: Path) -> str:
    """The one evidence root every proof of the run commits to."""
    roots = set()
    for proof in sorted((run_dir / RESULTS).glob("*/proof.json")):
        doc = parse_json(proof.read_bytes())
        roots.add(doc.get("evidence_root_hash") if isinstance(doc, dict) else None)
    if len(roots) != 1 or None in roots:
        raise EvidenceError(f"{run_dir}: no single evidence root in its proofs ({len(roots)})")
    return str(roots.pop())


def sign_results(run_dir: Path, key: Signer, signed_at: str | None = None) -> list[Path]:
    """Write RUN_DIR/signatures/ (replacing an older one whole); return the files written.
    `signed_at` (RFC 3339 UTC) defaults to now: verifiers hold it against the key's window."""
    run_dir = run_dir.absolute()
    rp = read_protocol(run_dir)
    tmp = run_dir / f".{SIGNATURES}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    old = run_dir / SIGNATURES
    files: dict[str, bytes] = {}
    sums = manifest(run_dir)  # before tmp exists? it is a dot dir: created after this line
    predicate = RunPredicate(
        protocol_id=rp.identities.protocol_id,
        protocol_hash=rp.identities.protocol_hash,
        evaluator_digest=judging_evaluator(run_dir),
        evidence_root_hash=evidence_root(run_dir),
        files=sums.count(b"\n"),
        signed_at=signed_at or now_signed_at(),
    )
    files[MANIFEST] = sums
    files[RUN_ENVELOPE] = envelope(_statement_bytes(run_statement(sums, predicate)), key)
    for statement in sorted((run_dir / RESULTS).glob(f"*/{STATEMENT_FILE}")):
        subject = statement.parent.name
        files[scorecard_envelope(subject)] = envelope(statement.read_bytes(), key)
    tmp.mkdir(mode=0o755)
    for rel, data in files.items():
        (tmp / rel.removeprefix(SIGNATURES + "/")).write_bytes(data)
    aside = run_dir / f".{SIGNATURES}.old-{os.getpid()}"
    if old.exists():
        old.rename(aside)
    tmp.rename(old)
    shutil.rmtree(aside, ignore_errors=True)
    return [run_dir / rel for rel in files]


def sign_head(log: Path, key: Signer, per_line: bool = False) -> Path:
    """Re-sign an append-only log's head (call under the log's lock, after appending).
    `per_line`: the head also lists each line's digest (a freeze log: refusals name a record)."""
    if not log.is_file():
        raise InputError("no such log to sign", file=str(log))
    data = read_bounded(log, MAX_LOG_BYTES, evidence=True)
    head = head_path(log)
    tmp = head.with_name(f".{head.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, envelope(_statement_bytes(head_statement(log, data, per_line)), key))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, head)
    dfd = os.open(head.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return head


def key_outside(run_dir: Path, key_directory: Path) -> None:
    """Refuse a key directory inside the run directory (a bundle is published whole)."""
    r, k = run_dir.resolve(), key_directory.resolve()
    if k == r or r in k.parents:
        raise InputError("the signing key directory is inside the run directory; refused",
                         file=str(key_directory))  # fmt: skip


def sign_if_keyed(run_dir: Path, log: Callable[[str], object] = print) -> bool:
    """Sign an evaluated run when a signing key is configured (`bench keys init`), and say
    either way. The one call `bench run` / `bench evaluate` make after writing the results."""
    from runner.signing.keys import has_key, key_dir, load_signer

    where = key_dir()
    if not has_key(where):
        # signatures over the results just replaced would name bytes that no longer exist
        stale = run_dir / SIGNATURES
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
            log(f"removed {stale}: it signed the results this evaluation replaced")
        log(
            f"unsigned: no signing key in {where} (`bench keys init`, then `bench keys sign "
            f"{run_dir}`): verify, reproduce and compare refuse this run unless "
            "--allow-unsigned, and registry add refuses it"
        )
        return False
    key_outside(run_dir, where)
    signer = load_signer(where)
    sign_results(run_dir, signer)
    log(f"signed {run_dir / SIGNATURES} with key {signer.public_key.keyid[:16]}")
    return True


def init_registry(registry: Path, key_dir: Path | None = None) -> Path:
    """`bench registry init`: an empty registry and its signed head (the key is loaded first: no
    key, no file); an existing file is never touched. Returns the head's path."""
    from runner.signing.keys import load_signer

    signer = load_signer(key_dir)
    if registry.exists():
        raise InputError("already exists; a registry is never recreated", file=str(registry))
    registry.parent.mkdir(parents=True, exist_ok=True)
    with registry.open("xb"):
        pass
    return sign_head(registry, signer)
