"""The freeze log's signed head (issue 29): `bench freeze` and `bench amend` re-sign it after every
append, and `plan`, `freeze`, `amend` and `run` believe the log only as the head covers it. A
rewrite (even one with every record resealed and rechained), a truncation and an unsigned append
are refused with exit 3 naming the first bad record; `bench freeze-seal` signs the head of a log
made before heads existed, never over a log that differs from the head it already has.
The session's throw-away key signs (tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evaluator.core.canonical import canonical_bytes, digest
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.trust.head import head_path
from tests.foundation.helpers import bench, copy_example


def _frozen_twice(tmp_path: Path) -> tuple[Path, Path]:
    spec = copy_example(tmp_path)
    assert bench("freeze", spec).exit_code == 0
    spec.write_text(spec.read_text().replace("cap = 3", "cap = 4"))
    assert bench("amend", spec, "--reason", "cap").exit_code == 0
    return spec, freezing.log_path(spec)


def _rewritten(log: Path, **first: object) -> None:
    """The first record edited and resealed, every later one rechained: what an editor of the
    file can do without the key (each line's own seal and the chain hold)."""
    records = freezing.read_log(log.with_name(log.name.replace(".freeze.jsonl", ".toml")))
    out: list[bytes] = []
    previous = None
    for n, rec in enumerate(records):
        update = {**(first if n == 0 else {}), "previous_record": previous, "record_hash": None}
        rec = rec.model_copy(update=update).sealed()
        previous = digest(rec.model_dump(mode="json"))
        out.append(canonical_bytes(rec.model_dump(mode="json")) + b"\n")
    log.write_bytes(b"".join(out))


def test_freeze_and_amend_sign_the_head(tmp_path: Path) -> None:
    spec, log = _frozen_twice(tmp_path)
    head = head_path(log)
    assert head.name == "example.freeze.head.dsse.json" and head.is_file()
    assert bench("plan", spec).exit_code == 0
    # the head covers both records, one digest each
    env = json.loads(head.read_bytes())
    assert env["payloadType"] == "application/vnd.in-toto+json"


def test_a_rewritten_log_is_refused_naming_its_first_record(tmp_path: Path) -> None:
    spec, log = _frozen_twice(tmp_path)
    _rewritten(log, reason="backdated", recorded_at="2000-01-01T00:00:00Z")
    assert len(freezing.read_log(spec)) == 2  # negative: the records alone still hold
    for command in (["plan", spec], ["freeze", spec], ["amend", spec, "--reason", "x"]):
        res = bench(*command)
        assert res.exit_code == 3, res.output
        assert "rewritten: record 1 is not the one its signed head covers" in res.output
        assert "Traceback" not in res.output


@pytest.mark.parametrize("cut", ["last record", "whole log", "log deleted"])
def test_a_truncated_log_is_refused(tmp_path: Path, cut: str) -> None:
    spec, log = _frozen_twice(tmp_path)
    lines = log.read_bytes().splitlines(keepends=True)
    if cut == "last record":
        log.write_bytes(lines[0])
        want = "record 2 (of 2 signed) is missing"
    elif cut == "whole log":
        log.write_bytes(b"")
        want = "record 1 (of 2 signed) is missing"
    else:
        log.unlink()
        want = "missing, though its signed head"
    res = bench("plan", spec)
    assert res.exit_code == 3 and want in res.output, res.output


def test_an_unsigned_append_is_refused(tmp_path: Path) -> None:
    spec, log = _frozen_twice(tmp_path)
    signed = log.read_bytes()
    # an amendment appended by the library without a sealer: a valid record, but unsigned
    spec.write_text(spec.read_text().replace("cap = 4", "cap = 5"))
    from runner.evaluator.protocol.identities import compute
    from runner.evaluator.protocol.specload import load_spec

    freezing.amend(spec, compute(load_spec(spec), spec), "no key")
    assert log.read_bytes().startswith(signed)
    res = bench("plan", spec)
    assert res.exit_code == 3, res.output
    assert "record 3 appended after its signed head, without the signing key" in res.output


def test_a_log_without_a_head_is_refused_until_sealed(tmp_path: Path) -> None:
    spec, log = _frozen_twice(tmp_path)
    head_path(log).unlink()  # a log frozen before heads existed
    res = bench("plan", spec)
    assert res.exit_code == 3 and "has no signed head" in res.output, res.output
    sealed = bench("freeze-seal", spec)
    assert sealed.exit_code == 0 and "2 records" in sealed.output, sealed.output
    assert bench("plan", spec).exit_code == 0


def test_seal_refuses_a_log_its_head_does_not_cover(tmp_path: Path) -> None:
    spec, log = _frozen_twice(tmp_path)
    _rewritten(log, reason="backdated")
    res = bench("freeze-seal", spec)
    assert res.exit_code == 3 and "record 1" in res.output, res.output
    assert bench("plan", spec).exit_code == 3  # still refused: the seal did not launder it


def test_seal_after_a_crash_between_append_and_head(tmp_path: Path) -> None:
    """An append whose re-signing never happened (the library without a sealer stands in for a
    crash) is sealed: the signed prefix holds and the new record's own seal and chain hold."""
    spec, _ = _frozen_twice(tmp_path)
    spec.write_text(spec.read_text().replace("cap = 4", "cap = 5"))
    from runner.evaluator.protocol.identities import compute
    from runner.evaluator.protocol.specload import load_spec

    freezing.amend(spec, compute(load_spec(spec), spec), "crash before the head")
    assert bench("freeze-seal", spec).exit_code == 0
    assert bench("plan", spec).exit_code == 0


def test_a_draft_needs_no_head_but_a_head_alone_is_refused(tmp_path: Path) -> None:
    spec = copy_example(tmp_path)
    assert bench("plan", spec).exit_code == 0  # a draft: neither log nor head
    assert bench("freeze", spec).exit_code == 0
    freezing.log_path(spec).unlink()
    res = bench("plan", spec)
    assert res.exit_code == 3 and "missing, though its signed head" in res.output


def test_a_head_signed_by_an_untrusted_key_is_refused(tmp_path: Path) -> None:
    from tests.keys import TestKey

    spec = copy_example(tmp_path)
    other = TestKey.create(tmp_path / "other")
    res = bench("freeze", spec)
    assert res.exit_code == 0
    from runner.signing.sign import sign_head

    sign_head(freezing.log_path(spec), other.signer(), per_line=True)
    res = bench("plan", spec)
    assert res.exit_code == 3, res.output
