"""Concurrent writers (real processes) never corrupt or fork the registry or a freeze log.

Each round races 12 processes; rounds repeat. Afterwards the chain holds, the signed head covers
exactly the file, each decision was recorded once, and every loser was refused by name.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.registry import Registry
from runner.evaluator.trust.head import check_head
from runner.evaluator.trust.keys import trusted_keys
from tests.evidence.synth import SPEC_AB
from tests.keys import TestKey

WRITERS = 12
ROUNDS = 3


def _anchored(path: Path, key: TestKey) -> Registry:
    from runner.signing.sign import sign_head

    keys = trusted_keys(key.trusted_dir)
    signer = key.signer()
    return Registry(
        path, anchor=lambda p: check_head(p, keys), sealer=lambda p: sign_head(p, signer)
    )


def _register(args: tuple[str, TestKey, str]) -> str:
    path, key, card = args
    try:
        return _anchored(Path(path), key).add(Path(card)).scorecard_hash
    except InputError as exc:
        return f"refused: {exc}"


def _withdraw(args: tuple[str, TestKey, str]) -> str:
    path, key, target = args
    try:
        return _anchored(Path(path), key).retire("withdrawn", target, "race").type
    except InputError as exc:
        return f"refused: {exc}"


def _pool() -> mp.pool.Pool:
    return mp.get_context("fork").Pool(WRITERS)


def test_racing_registry_writers(
    make_run: Callable[..., Path], tmp_path: Path, key: TestKey
) -> None:
    from runner.signing.sign import sign_head

    run = make_run()
    cards = [str(run / f"results/{s}/scorecard.json") for s in ("a", "b")]
    for round_ in range(ROUNDS):
        path = tmp_path / f"registry-{round_}.jsonl"
        path.touch()
        sign_head(path, key.signer())
        with _pool() as pool:
            got = pool.map(_register, [(str(path), key, cards[i % 2]) for i in range(WRITERS)])
        won = [g for g in got if not g.startswith("refused")]
        assert len(won) == 2 and len(set(won)) == 2, got
        assert all("already registered" in g for g in got if g.startswith("refused")), got
        with _pool() as pool:
            got = pool.map(_withdraw, [(str(path), key, won[0])] * WRITERS)
        assert got.count("withdrawn") == 1, got
        assert all("already withdrawn" in g for g in got if g != "withdrawn"), got
        reg = _anchored(path, key)
        entries = reg.entries()  # the chain, every seal and the signed head hold
        assert [e.type for e in entries] == ["published", "published", "withdrawn"]
        assert check_head(path, trusted_keys(key.trusted_dir)).lines == 3


def _freeze(spec: str) -> str:
    path = Path(spec)
    ids = compute(load_spec(path), path)
    try:
        return freezing.freeze(path, ids).record_hash or ""
    except InputError as exc:
        return f"refused: {exc}"


def _amend(spec: str) -> str:
    path = Path(spec)
    ids = compute(load_spec(path), path)
    try:
        return freezing.amend(path, ids, "race").record_hash or ""
    except InputError as exc:
        return f"refused: {exc}"


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_racing_freezes_and_amendments(tmp_path: Path, round_: int) -> None:
    spec = tmp_path / SPEC_AB.name
    shutil.copyfile(SPEC_AB, spec)
    with _pool() as pool:
        got = pool.map(_freeze, [str(spec)] * WRITERS)
    assert len(set(got)) == 1 and not got[0].startswith("refused"), got  # one record, seen by all
    spec.write_text(spec.read_text().replace("cap = 2", "cap = 3"))
    with _pool() as pool:
        got = pool.map(_amend, [str(spec)] * WRITERS)
    won = [g for g in got if not g.startswith("refused")]
    assert len(won) == 1, got
    assert all("nothing to amend" in g for g in got if g.startswith("refused")), got
    records = freezing.read_log(spec)  # the chain and every record's seal hold
    assert [r.type for r in records] == ["freeze", "amendment"]
    assert not list(tmp_path.glob("*.lock"))  # the lock is the directory's, no file beside
