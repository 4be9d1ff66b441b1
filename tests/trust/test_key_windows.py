"""A retired key verifies what it signed before its retirement and nothing after.

Throw-away keys with a `<name>.window.toml` beside their public key; the signed time is the one
the signed payload carries (`signed_at`, or for older signatures the latest time the signed
journals / registry lines record), never a file's mtime. And the repository's own trusted keys:
every published bundle and the registry head still verify under the windows of keys/trusted/.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.trust.envelope import TrustError
from runner.evaluator.trust.head import check_head
from runner.evaluator.trust.keys import trusted_keys
from runner.evaluator.trust.run import RUN_ENVELOPE, check_run, check_scorecard, signature_problem
from runner.evaluator.trust.window import KeyWindow, SignedTime, refusal, window_of
from runner.signing.sign import envelope, sign_head, sign_results
from tests.keys import TestKey

cli = CliRunner()
ROOT = project_root()


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestKey:
    """A throw-away key of this test alone (its window file must not reach other tests)."""
    made = TestKey.create(tmp_path / "windowed-key")
    for name, value in made.env().items():
        monkeypatch.setenv(name, value)
    return made


def _window(key: TestKey, body: str) -> None:
    (key.trusted_dir / "test.window.toml").write_text(body)


def _check(bundle: Path, key: TestKey) -> None:
    keys = trusted_keys(key.trusted_dir)
    run = check_run(bundle, keys)
    for card in sorted((bundle / "results").glob("*/scorecard.json")):
        check_scorecard(bundle, card.parent.name, keys, run)


# ------------------------------------------------------------------ signed_at, exact


def test_a_signature_inside_the_window_verifies(make_run: Callable[..., Path],
                                                key: TestKey) -> None:  # fmt: skip
    run = make_run(signed=False)
    sign_results(run, key.signer(), signed_at="2026-12-01T12:00:00Z")
    _window(key, "not_before = 2026-12-01T00:00:00Z\nnot_after = 2026-12-02T00:00:00Z\n")
    _check(run, key)


def test_a_retired_key_signing_after_its_retirement_is_refused(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    run = make_run(signed=False)
    sign_results(run, key.signer(), signed_at="2026-12-03T00:00:00Z")
    _window(key, 'not_after = 2026-12-02T00:00:00Z\nnote = "retired"\n')
    with pytest.raises(TrustError, match=r"retired at 2026-12-02T00:00:00Z.*signed at 2026-12-03"):
        _check(run, key)
    # the CLI refuses it too (exit 3), naming the window
    res = cli.invoke(app, ["verify", str(run)])
    assert res.exit_code == 3 and "validity window" in res.output, res.output


def test_a_signature_dated_before_the_key_was_made_is_refused(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    run = make_run(signed=False)
    sign_results(run, key.signer(), signed_at="2026-11-01T00:00:00Z")
    _window(key, "not_before = 2026-12-01T00:00:00Z\n")
    with pytest.raises(TrustError, match="valid from 2026-12-01"):
        _check(run, key)


def test_a_scorecard_envelope_of_a_retired_key_is_judged_at_the_runs_signed_time(
    make_run: Callable[..., Path], key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    """The run re-signed by a current key, its scorecard envelopes by the retired one: refused."""
    run = make_run(signed=False)
    sign_results(run, key.signer(), signed_at="2026-12-03T00:00:00Z")  # scorecards by `key`
    retired = run / "signatures" / "a.scorecard.dsse.json"
    kept = retired.read_bytes()
    sign_results(run, other_key.signer(), signed_at="2026-12-03T00:00:00Z")  # run by the new key
    retired.write_bytes(kept)
    both = tmp_path / "both"
    both.mkdir()
    (both / "old.pub").write_bytes((key.trusted_dir / "test.pub").read_bytes())
    (both / "old.window.toml").write_text("not_after = 2026-12-02T00:00:00Z\n")
    (both / "new.pub").write_bytes((other_key.trusted_dir / "test.pub").read_bytes())
    problem = signature_problem(run, trusted_keys(both))
    assert problem is not None and "a.scorecard.dsse.json" in problem and "retired" in problem


def test_one_valid_key_among_the_signers_is_enough(
    make_run: Callable[..., Path], key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    """An envelope signed by a retired and a current key verifies through the current one."""
    run = make_run(signed=False)
    sign_results(run, key.signer(), signed_at="2026-12-03T00:00:00Z")
    env_path = run / RUN_ENVELOPE
    doc = json.loads(env_path.read_bytes())
    payload = base64.b64decode(doc["payload"])
    extra = json.loads(envelope(payload, other_key.signer()))["signatures"]
    doc["signatures"] += extra
    env_path.write_bytes(canonical_bytes(doc) + b"\n")
    both = tmp_path / "both"
    both.mkdir()
    (both / "old.pub").write_bytes((key.trusted_dir / "test.pub").read_bytes())
    (both / "old.window.toml").write_text("not_after = 2026-12-02T00:00:00Z\n")
    (both / "new.pub").write_bytes((other_key.trusted_dir / "test.pub").read_bytes())
    check_run(run, trusted_keys(both))
    (both / "new.pub").unlink()
    with pytest.raises(TrustError, match="retired"):
        check_run(run, trusted_keys(both))


# ---------------------------------------------------- older signatures: the signed bytes' time


def _unsign_time(run: Path, signer_key: TestKey) -> None:
    """Re-sign the run the way signers did before signed_at existed (no signed_at)."""
    env_path = run / RUN_ENVELOPE
    payload = json.loads(base64.b64decode(json.loads(env_path.read_bytes())["payload"]))
    del payload["predicate"]["signed_at"]
    env_path.write_bytes(envelope(canonical_bytes(payload) + b"\n", signer_key.signer()))


def _journal_time_s(run: Path) -> float:
    last = max(
        int(json.loads(p.read_bytes().splitlines()[-1])["at_ns"])
        for p in (run / "journals").glob("*.jsonl")
    )
    return last / 1e9


def test_an_older_signature_is_judged_at_its_journals_latest_time(
    make_run: Callable[..., Path], key: TestKey
) -> None:
    from datetime import UTC, datetime, timedelta

    run = make_run(signed=False)
    sign_results(run, key.signer())
    _unsign_time(run, key)
    latest = datetime.fromtimestamp(_journal_time_s(run), UTC)
    iso = "%Y-%m-%dT%H:%M:%SZ"
    _window(key, f"not_after = {(latest + timedelta(seconds=2)).strftime(iso)}\n")
    _check(run, key)
    _window(key, f"not_after = {(latest - timedelta(seconds=2)).strftime(iso)}\n")
    with pytest.raises(TrustError, match=r"signed after .*latest at_ns of its signed journals"):
        _check(run, key)


def test_the_file_mtime_is_not_the_signed_time(make_run: Callable[..., Path],
                                               key: TestKey) -> None:  # fmt: skip
    """Back-dating every file's mtime does not let a retired key's late signature through."""
    run = make_run(signed=False)
    sign_results(run, key.signer(), signed_at="2026-12-03T00:00:00Z")
    _window(key, "not_after = 2026-12-02T00:00:00Z\n")
    for p in run.rglob("*"):
        os.utime(p, (1e9, 1e9), follow_symlinks=False)
    with pytest.raises(TrustError, match="retired"):
        _check(run, key)


# --------------------------------------------------------------------- the registry head


def test_a_head_signed_by_a_retired_key_after_retirement_is_refused(
    tmp_path: Path, key: TestKey
) -> None:
    log = tmp_path / "registry.jsonl"
    log.write_bytes(b'{"recorded_at":"2026-12-01T10:00:00Z"}\n')
    sign_head(log, key.signer())  # signed_at: now
    check_head(log, trusted_keys(key.trusted_dir))
    _window(key, "not_after = 2026-12-01T11:00:00Z\n")
    with pytest.raises(TrustError, match="signed_at of the head"):
        check_head(log, trusted_keys(key.trusted_dir))


def test_an_older_head_is_judged_at_its_latest_recorded_at(tmp_path: Path, key: TestKey) -> None:
    from runner.evaluator.trust.head import HEAD_PREDICATE, head_path

    log = tmp_path / "registry.jsonl"
    log.write_bytes(
        b'{"recorded_at":"2026-12-01T10:00:00Z"}\n{"recorded_at":"2026-12-01T12:00:00Z"}\n'
    )
    import hashlib

    data = log.read_bytes()
    st_ = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": log.name, "digest": {"sha256": hashlib.sha256(data).hexdigest()}}],
        "predicateType": HEAD_PREDICATE,
        "predicate": {"length": len(data), "lines": 2},  # no signed_at: an older head
    }
    head_path(log).write_bytes(envelope(canonical_bytes(st_) + b"\n", key.signer()))
    _window(key, "not_after = 2026-12-01T12:30:00Z\n")
    check_head(log, trusted_keys(key.trusted_dir))
    _window(key, "not_after = 2026-12-01T11:00:00Z\n")
    with pytest.raises(TrustError, match="signed after 2026-12-01T12:00:00Z"):
        check_head(log, trusted_keys(key.trusted_dir))


# ----------------------------------------------------------------- the window file itself


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("not_after = 2026-13-01T00:00:00Z\n", "not TOML"),
        ('not_after = "yesterday"\n', "not_after"),
        ("not_after = 2026-12-01T00:00:00Z\nextra = 1\n", "extra"),
        ("not_before = 2026-12-02T00:00:00Z\nnot_after = 2026-12-01T00:00:00Z\n", "not_before"),
    ],
)
def test_a_bad_window_file_is_an_input_error(key: TestKey, body: str, match: str) -> None:
    _window(key, body)
    with pytest.raises(InputError, match=match) as exc:
        trusted_keys(key.trusted_dir)
    assert "test.window.toml" in str(exc.value)


@settings(max_examples=60, deadline=None)
@given(
    after=st.integers(0, 10**6), at=st.integers(0, 10**6), exact=st.booleans(),
    before=st.none() | st.integers(0, 10**6),
)  # fmt: skip
def test_window_rule(after: int, at: int, exact: bool, before: int | None) -> None:
    """Refused exactly when past not_after, or (an exact time only) before not_before."""
    from datetime import UTC, datetime, timedelta

    from runner.evaluator.trust.window import with_window

    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    keys = trusted_keys(ROOT / "keys" / "trusted")
    base = next(iter(keys.values()))
    if before is not None and before > after:
        before, after = after, before
    w = KeyWindow(
        not_after=t0 + timedelta(seconds=after),
        not_before=None if before is None else t0 + timedelta(seconds=before),
    )
    k = with_window(base, w)
    assert window_of(k) == w
    got = refusal(k, SignedTime(at=t0 + timedelta(seconds=at), exact=exact, source="t"))
    expect = at > after or (exact and before is not None and at < before)
    assert (got is not None) == expect


# ------------------------------------------------------------ the repository's own keys


def test_the_repository_keys_carry_their_windows() -> None:
    keys = trusted_keys(ROOT / "keys" / "trusted")
    project = keys["305ba62bfdb5c96efbb3585a87bf03637f33322cfdefc18a6e8922182aecc4be"]
    pw = window_of(project)
    assert pw is not None and pw.not_after is None and pw.not_before is not None
    retired = [k for k in keys.values() if k is not project]
    assert len(retired) == 3
    for k in retired:
        w = window_of(k)
        assert w is not None and w.not_after is not None and w.not_after <= pw.not_before


@pytest.mark.parametrize(
    "bundle",
    sorted(
        p for p in (ROOT / "vectors" / "published").iterdir() if (p / "protocol.json").is_file()
    ),
    ids=lambda p: p.name,
)
def test_every_published_bundle_verifies_under_the_windows(bundle: Path) -> None:
    assert signature_problem(bundle, trusted_keys(ROOT / "keys" / "trusted")) is None


def test_the_registry_head_verifies_under_the_windows() -> None:
    check_head(ROOT / "registry" / "registry.jsonl", trusted_keys(ROOT / "keys" / "trusted"))


@pytest.mark.parametrize("pad", [0, 70_000, 300_000])
def test_the_latest_journal_time_reads_long_last_lines(tmp_path: Path, pad: int) -> None:
    """The last line is found from the end however long it is (up to a journal line's cap),
    and the latest at_ns of all journals wins; an empty journal records no time."""
    from runner.evaluator.trust.window import latest_journal_time

    a, b, empty = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    a.write_text(
        '{"at_ns":"5000000000"}\n' + json.dumps({"at_ns": "7000000000", "x": "y" * pad}) + "\n"
    )
    b.write_text('{"at_ns":"9000000000"}\n{"at_ns":"6000000000"}\n')
    empty.write_text("")
    got = latest_journal_time([a, b, empty], "t")
    assert got is not None and got.at.timestamp() == 7.0 and not got.exact
    assert latest_journal_time([empty], "t") is None
