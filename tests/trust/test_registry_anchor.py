"""The registry is checked against its signed head: truncated, rewritten (even with every hash
chain recomputed) or appended to without the key, it is refused; a missing head is an error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.canonical import canonical_bytes, digest
from runner.evaluator.publish.registry import Registry
from runner.evaluator.trust.head import check_head, head_path
from runner.evaluator.trust.keys import trusted_keys
from tests.keys import TestKey

cli = CliRunner()


@pytest.fixture
def registry(make_run: Callable[..., Path], tmp_path: Path, key: TestKey) -> Path:
    path = tmp_path / "registry.jsonl"
    assert cli.invoke(app, ["registry", "init", "--registry", str(path)]).exit_code == 0
    run = make_run()
    for subject in ("a", "b"):
        card = run / f"results/{subject}/scorecard.json"
        res = cli.invoke(app, ["registry", "add", str(card), "--registry", str(path)])
        assert res.exit_code == 0, res.output
    return path


def _list(path: Path) -> tuple[int, str]:
    res = cli.invoke(app, ["registry", "list", "--registry", str(path)])
    return res.exit_code, res.output


def test_the_head_covers_every_entry(registry: Path, key: TestKey) -> None:
    head = check_head(registry, trusted_keys(key.trusted_dir))
    assert head.lines == 2 and head.length == registry.stat().st_size
    assert head_path(registry).name == "registry.head.dsse.json"
    assert _list(registry)[0] == 0


def test_a_truncated_registry_is_refused(registry: Path) -> None:
    lines = registry.read_bytes().splitlines(keepends=True)
    registry.write_bytes(lines[0])  # a valid registry of one entry: the chain alone cannot tell
    code, output = _list(registry)
    assert code == 3 and "truncated" in output


def test_a_rewritten_registry_is_refused(registry: Path) -> None:
    data = bytearray(registry.read_bytes())
    i = data.index(b'"recorded_at":"') + len(b'"recorded_at":"')
    data[i] = ord("1") if data[i] != ord("1") else ord("2")
    registry.write_bytes(bytes(data))
    code, output = _list(registry)
    assert code == 3 and "rewritten" in output


def test_a_rewrite_with_every_chain_recomputed_is_refused(registry: Path) -> None:
    # The attacker edits the first entry (its subject) and reseals every record and link.
    entries = Registry(registry).entries()
    out, previous = [], None
    for n, e in enumerate(entries):
        update: dict[str, object] = {"previous": previous}
        if n == 0:
            update["subject_id"] = "z"
        changed = e.model_copy(update=update)
        sealed = changed.sealed()
        out.append(canonical_bytes(sealed.model_dump(mode="json")) + b"\n")
        previous = digest(sealed.model_dump(mode="json"))
    registry.write_bytes(b"".join(out))
    assert [e.subject_id for e in Registry(registry).entries()] == ["z", "b"]  # chain holds
    code, output = _list(registry)
    assert code == 3 and ("rewritten" in output or "truncated" in output)


def test_an_entry_appended_without_the_key_is_refused(
    registry: Path, make_run: Callable[..., Path]
) -> None:
    other = make_run("b-ineligible")
    Registry(registry).add(other / "results/a/scorecard.json")  # no sealer: no signing key
    code, output = _list(registry)
    assert code == 3 and "appended after its signed head" in output


def test_a_missing_head_is_an_error_until_sealed(registry: Path) -> None:
    head_path(registry).unlink()
    code, output = _list(registry)
    assert code == 3 and "no signed head" in output
    res = cli.invoke(app, ["registry", "seal", "--registry", str(registry)])
    assert res.exit_code == 0, res.output
    assert _list(registry)[0] == 0


def test_a_head_signed_by_another_key_is_refused(registry: Path, other_key: TestKey) -> None:
    from runner.signing.sign import sign_head

    sign_head(registry, other_key.signer())
    code, output = _list(registry)
    assert code == 3 and "untrusted key" in output


def test_seal_refuses_a_broken_chain(registry: Path) -> None:
    lines = registry.read_bytes().splitlines(keepends=True)
    registry.write_bytes(lines[1])  # the second entry alone: its previous link names nothing
    head_path(registry).unlink()
    res = cli.invoke(app, ["registry", "seal", "--registry", str(registry)])
    assert res.exit_code == 2 and "chain is broken" in res.output
