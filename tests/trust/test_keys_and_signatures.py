"""The signing key stays private, and a run's signature fails on every change after signing.

Negative first: each way of tampering with a signed run (a file changed, added or removed, the
file list recomputed, the envelope's payload or signature edited, another key, no signature)
is refused, naming what changed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.trust.envelope import TrustError
from runner.evaluator.trust.keys import trusted_keys
from runner.evaluator.trust.run import MANIFEST, RUN_ENVELOPE, check_run, check_scorecard, manifest
from runner.signing.keys import PRIVATE, PUBLIC, init_keys, load_signer
from runner.signing.sign import key_outside
from tests.keys import TestKey

EVAL = evaluator_digest()
cli = CliRunner()


@pytest.fixture
def signed(make_run: Callable[..., Path], key: TestKey) -> Path:
    return make_run("publishable")


def _check(bundle: Path, key: TestKey) -> None:
    keys = trusted_keys(key.trusted_dir)
    run = check_run(bundle, keys)
    for card in sorted((bundle / "results").glob("*/scorecard.json")):
        check_scorecard(bundle, card.parent.name, keys, run)


# ------------------------------------------------------------------------------ the key itself


def test_keys_init_is_owner_only_and_never_overwrites(tmp_path: Path) -> None:
    where = tmp_path / "k"
    res = cli.invoke(app, ["keys", "init", "--dir", str(where)])
    assert res.exit_code == 0, res.output
    assert "BEGIN PUBLIC KEY" in res.output and "key id" in res.output
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    assert stat.S_IMODE((where / PRIVATE).stat().st_mode) == 0o600
    before = (where / PRIVATE).read_bytes()
    again = cli.invoke(app, ["keys", "init", "--dir", str(where)])
    assert again.exit_code == 2 and "never overwritten" in again.output
    assert (where / PRIVATE).read_bytes() == before
    shown = cli.invoke(app, ["keys", "show", "--dir", str(where)])
    assert shown.exit_code == 0 and (where / PUBLIC).read_text().strip() in shown.output


@pytest.mark.parametrize(("target", "mode"), [("key", 0o640), ("key", 0o604), ("dir", 0o755)])
def test_a_key_others_can_read_is_refused(tmp_path: Path, target: str, mode: int) -> None:
    made = init_keys(tmp_path / "k")
    load_signer(tmp_path / "k")  # fine as created
    os.chmod(made.path.parent / PRIVATE if target == "key" else made.path.parent, mode)
    with pytest.raises(InputError, match="accessible to others"):
        load_signer(tmp_path / "k")


def test_no_key_is_named_with_the_command_that_makes_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="bench keys init"):
        load_signer(tmp_path / "none")


def test_the_key_directory_is_never_inside_the_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="inside the run directory"):
        key_outside(tmp_path, tmp_path / "keys")
    key_outside(tmp_path / "run", tmp_path / "keys")


def test_the_default_key_directory_is_root_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.signing.keys import DEFAULT_KEY_DIR, KEY_DIR_ENV, key_dir

    monkeypatch.delenv(KEY_DIR_ENV, raising=False)
    assert key_dir() == DEFAULT_KEY_DIR == Path("/etc/afb/keys")


# --------------------------------------------------------------------- a signed run, tampered


def test_a_signed_run_checks(signed: Path, key: TestKey) -> None:
    _check(signed, key)
    sums = (signed / MANIFEST).read_bytes()
    assert sums == manifest(signed)  # sha256sum -c format, every file of the run
    assert b"  protocol.json\n" in sums and b"  results/a/scorecard.json\n" in sums
    assert b"signatures/" not in sums


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2
    data[i] = ord("0") if data[i] != ord("0") else ord("1")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        (lambda b: _flip_byte(sorted((b / "journals").glob("*-a1.jsonl"))[0]),
         "changed since it was signed"),
        (lambda b: (b / "blobs" / "sha256" / ("0" * 64)).write_bytes(b"x"),
         "blobs/sha256/" + "0" * 64 + ": not signed"),
        (lambda b: _flip_byte(b / "protocol.json"), "protocol.json: changed since it was signed"),
        (lambda b: _flip_byte(b / "results/a/scorecard.json"),
         "results/a/scorecard.json: changed"),
        (lambda b: (b / "journals" / "x.jsonl").write_bytes(b""),
         "journals/x.jsonl: not signed"),
        (lambda b: (b / ".hidden").write_bytes(b"x"), ".hidden: not signed"),
        (lambda b: sorted((b / "journals").glob("*-a1.jsonl"))[0].unlink(),
         "signed but missing"),
        (lambda b: (b / "results/a/cell-scores.jsonl").unlink(), "signed but missing"),
    ],
    ids=["journal", "blob", "protocol", "scorecard", "extra-journal", "dotfile",
         "removed-journal", "removed-result"],
)  # fmt: skip
def test_any_file_changed_after_signing_is_named(
    signed: Path, key: TestKey, tamper: object, named: str
) -> None:
    tamper(signed)  # type: ignore[operator]
    with pytest.raises(TrustError, match=named.replace(".", r"\.")):
        _check(signed, key)


def test_a_symlinked_copy_is_refused(signed: Path, key: TestKey, tmp_path: Path) -> None:
    card = signed / "results/a/scorecard.json"
    outside = tmp_path / "copy.json"
    shutil.copyfile(card, outside)
    card.unlink()
    card.symlink_to(outside)  # identical bytes, through a symlink out of the run
    with pytest.raises(TrustError, match="not a regular file"):
        _check(signed, key)


def test_a_recomputed_file_list_is_not_the_signed_one(signed: Path, key: TestKey) -> None:
    _flip_byte(signed / "results/b/scorecard.json")
    (signed / MANIFEST).write_bytes(manifest(signed))  # the attacker lists the new bytes
    with pytest.raises(TrustError, match="not the file list the signature covers"):
        _check(signed, key)


def _envelope(bundle: Path) -> dict[str, object]:
    doc = json.loads((bundle / RUN_ENVELOPE).read_bytes())
    assert isinstance(doc, dict)
    return doc


def test_an_edited_payload_or_signature_does_not_verify(signed: Path, key: TestKey) -> None:
    doc = _envelope(signed)
    statement = json.loads(base64.b64decode(str(doc["payload"])))
    statement["predicate"]["evidence_root_hash"] = "sha256:" + "0" * 64
    doc["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (signed / RUN_ENVELOPE).write_bytes(canonical_bytes(doc) + b"\n")
    with pytest.raises(TrustError, match="does not verify"):
        _check(signed, key)
    doc = _envelope(signed)
    sigs = doc["signatures"]
    assert isinstance(sigs, list)
    raw = bytearray(base64.b64decode(sigs[0]["sig"]))
    raw[0] ^= 1
    sigs[0]["sig"] = base64.b64encode(bytes(raw)).decode()
    (signed / RUN_ENVELOPE).write_bytes(canonical_bytes(doc) + b"\n")
    with pytest.raises(TrustError, match="does not verify"):
        _check(signed, key)


def test_an_envelope_in_another_spelling_is_refused(signed: Path, key: TestKey) -> None:
    doc = _envelope(signed)
    (signed / RUN_ENVELOPE).write_text(json.dumps(doc, indent=1))  # same meaning, other bytes
    with pytest.raises(TrustError, match="canonical form"):
        _check(signed, key)


def test_an_envelope_without_signatures_is_unsigned(signed: Path, key: TestKey) -> None:
    doc = _envelope(signed)
    doc["signatures"] = []
    (signed / RUN_ENVELOPE).write_bytes(canonical_bytes(doc) + b"\n")
    with pytest.raises(TrustError, match="unsigned"):
        _check(signed, key)


def test_another_key_is_not_trusted(signed: Path, key: TestKey, other_key: TestKey) -> None:
    other_key.sign(signed)  # a valid signature, by a key nobody listed
    with pytest.raises(TrustError, match="untrusted key"):
        _check(signed, key)
    _check(signed, other_key)  # ... which verifies once that key is trusted


def test_an_unsigned_run_is_refused(make_run: Callable[..., Path], key: TestKey) -> None:
    bundle = make_run(signed=False)
    with pytest.raises(TrustError, match="missing"):
        _check(bundle, key)


def test_an_empty_trust_list_trusts_nobody(signed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "nobody"
    empty.mkdir()
    with pytest.raises(TrustError, match="untrusted key"):
        check_run(signed, trusted_keys(empty))
    with pytest.raises(InputError, match="no trusted-keys directory"):
        trusted_keys(tmp_path / "missing")


def test_a_scorecard_envelope_must_name_this_scorecard(signed: Path, key: TestKey) -> None:
    # a's signed statement put where b's belongs: b's bytes are not what it names
    sig = signed / "signatures"
    shutil.copyfile(sig / "a.scorecard.dsse.json", sig / "b.scorecard.dsse.json")
    with pytest.raises(TrustError, match="signs another scorecard"):
        _check(signed, key)


def test_bench_keys_sign_signs_only_a_run_that_verifies(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    bundle = make_run(signed=False)
    _flip_byte(bundle / "results/a/scorecard.json")
    res = cli.invoke(app, ["keys", "sign", str(bundle)])
    assert res.exit_code == 3 and "does not verify" in res.output
    assert not (bundle / "signatures").exists()


# ------------------------------------------------------------------------------ the invariant


@pytest.fixture(scope="module")
def module_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TestKey]:
    from tests.evidence.synth import evaluated_bundle

    root = tmp_path_factory.mktemp("afb-flip")
    key = TestKey.create(root)
    bundle = evaluated_bundle(root, EVAL)
    shutil.rmtree(bundle / "signatures", ignore_errors=True)
    return key.sign(bundle), key


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_byte_of_any_signed_file_changed_is_refused(
    module_signed: tuple[Path, TestKey], data: st.DataObject
) -> None:
    bundle, key = module_signed
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and p.stat().st_size > 0)
    path = data.draw(st.sampled_from(files), label="file")
    raw = path.read_bytes()
    at = data.draw(st.integers(0, len(raw) - 1), label="offset")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[at]), label="byte")
    path.write_bytes(raw[:at] + bytes([new]) + raw[at + 1 :])
    try:
        with pytest.raises(TrustError):
            _check(bundle, key)
    finally:
        path.write_bytes(raw)
    _check(bundle, key)  # restored: it checks again


def test_a_file_name_no_manifest_can_list_is_refused(signed: Path, key: TestKey) -> None:
    (signed / "results" / "a\nb").write_bytes(b"")  # would forge a second manifest line
    with pytest.raises(TrustError, match="cannot be listed"):
        _check(signed, key)
