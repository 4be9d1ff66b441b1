"""CI's reproducibility gate over the published reference results (vectors/published/).

- Every published bundle either re-derives byte for byte with this evaluator (REPRODUCED), or
  all of its scorecards are superseded in the registry with a replacement protocol hash.
- Every published bundle also reproduces with its OWN evaluator: a superseded one through
  `bench reproduce --evaluator-from-history` (the git commit whose evaluator inputs hash to the
  bundle's digest, run from a temporary export); a one-byte change still fails, naming the field.
- specs/swe-lite.toml and specs/swe-lite-agents.toml (the published protocols) are frozen:
  changing an evaluator input (or any rule) changes their protocol_hash, and this fails until the
  change is recorded with `bench amend`.
- Each one's current protocol has a published, registered bundle: an amendment needs a new
  published result under it (docs: README "Reproducing and publishing").
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.evaluator.core.canonical import digest, parse_json
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.protocol.identities import compute
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.load import load_result
from runner.evaluator.publish.registry import Registry
from runner.evaluator.publish.reproduce import reproduce

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "vectors" / "published"
REGISTRY = Registry(ROOT / "registry" / "registry.jsonl")
SWE_LITE = ROOT / "specs" / "swe-lite.toml"
GATED = (SWE_LITE, ROOT / "specs" / "swe-lite-agents.toml")  # the published protocols
BUNDLES = (
    sorted(p for p in PUBLISHED.iterdir() if (p / "protocol.json").is_file())
    if PUBLISHED.is_dir()
    else []
)


@pytest.mark.parametrize("spec_path", GATED, ids=[p.stem for p in GATED])
def test_published_protocol_is_frozen(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    ids = compute(spec, spec_path)
    state, _ = freezing.status(spec_path, ids)
    name = f"specs/{spec_path.name}"
    assert state is freezing.ProtocolStatus.FROZEN, (
        f"{name} is {state.value}: an evaluator input or rule changed; record it with "
        f"`bench amend {name} --reason ...` and publish a result under the new protocol"
    )


@pytest.mark.parametrize("spec_path", GATED, ids=[p.stem for p in GATED])
def test_current_protocol_has_a_registered_published_bundle(spec_path: Path) -> None:
    current = compute(load_spec(spec_path), spec_path).protocol_hash
    state = REGISTRY.state()
    matching = [b for b in BUNDLES if read_protocol(b).identities.protocol_hash == current]
    assert matching, f"no published bundle under the current protocol {current}"
    live = []
    for b in matching:
        # A bundle under the current protocol may be retired (a harness fault found after it was
        # published, a re-run under the same rules replaces it), but never left unregistered.
        types = set()
        for card_path in sorted((b / "results").glob("*/scorecard.json")):
            entry = state.get(load_result(card_path).scorecard_hash())
            assert entry is not None, f"{card_path} is not in the registry"
            if entry.type == "superseded":
                assert entry.replacement_scorecard_hash, f"{card_path}: superseded by nothing"
                assert state[entry.replacement_scorecard_hash].type == "published"
            types.add(entry.type)
        if types == {"published"}:
            live.append(b)
    assert live, f"every bundle under the current protocol {current} is retired"


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_published_bundle_reproduces_or_is_superseded(bundle: Path) -> None:
    rp = read_protocol(bundle)
    state = REGISTRY.state()
    paths = sorted((bundle / "results").glob("*/scorecard.json"))
    if rp.identities.evaluator_digest != evaluator_digest():
        # Made by another evaluator, possibly under an older scorecard schema: identify each card
        # by the digest of its canonical JSON (what `scorecard_hash` is), without the model.
        for path in paths:
            entry = state.get(digest(parse_json(path.read_bytes())))
            assert entry is not None and entry.type in ("superseded", "withdrawn"), (
                f"{bundle.name} was made by another evaluator and is still published: "
                "supersede it (bench registry supersede) after publishing its replacement"
            )
            if entry.type == "superseded":
                assert entry.replacement_protocol_hash, "supersession without a replacement"
        return
    for path in paths:
        assert load_result(path).scorecard_hash() == digest(parse_json(path.read_bytes()))
    problems = reproduce(bundle, evaluator_digest())
    assert problems == [], f"{bundle.name} does not reproduce: {problems[:3]}"


def test_an_older_evaluators_scorecard_is_named_not_loaded(tmp_path: Path) -> None:
    # The first published bundle predates afb.scorecard/2 (per-cell rows inline): it stays in the
    # repository, superseded, and is refused by name wherever a current result is expected.
    from typer.testing import CliRunner

    from runner.cli.main import app
    from runner.evaluator.core.errors import EvidenceError

    old = Path(__file__).resolve().parents[2] / "vectors/published"
    old = old / "swe-lite-20261130T105323Z-8d5a27/results/blind-retry/scorecard.json"
    assert parse_json(old.read_bytes())["schema"] == "afb.scorecard/1"
    with pytest.raises(EvidenceError, match=re.escape("'afb.scorecard/1' is not 'afb.scorecard/")):
        load_result(old)
    new = (
        sorted(
            b
            for b in BUNDLES
            if read_protocol(b).identities.evaluator_digest == evaluator_digest()
            and (b / "results/checkpoint/scorecard.json").is_file()  # swe-lite's, not -agents'
        )[-1]
        / "results/checkpoint/scorecard.json"
    )
    out = tmp_path / "cmp"
    result = CliRunner().invoke(app, ["compare", str(old), str(new), "--out", str(out)])
    assert result.exit_code == 4, result.output
    assert "afb.scorecard/1" in result.output and not out.exists()


HAS_HISTORY = (
    shutil.which("git") is not None
    and subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
        capture_output=True, text=True, check=False,
    ).stdout.strip() == "false"
)  # fmt: skip
needs_history = pytest.mark.skipif(not HAS_HISTORY, reason="no full git history (not a clone)")


def _reproduce_cli(bundle: Path) -> tuple[int, str]:
    from typer.testing import CliRunner

    from runner.cli.main import app

    result = CliRunner().invoke(app, ["reproduce", "--evaluator-from-history", str(bundle)])
    return result.exit_code, result.output


@needs_history
@pytest.mark.uv  # an older evaluator with another uv.lock runs through `uv run`
@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_every_published_bundle_reproduces_with_its_own_evaluator(bundle: Path) -> None:
    code, output = _reproduce_cli(bundle)
    assert code == 0, output
    ours = read_protocol(bundle).identities.evaluator_digest == evaluator_digest()
    assert ("with its own evaluator (commit" in output) is not ours, output
    assert "REPRODUCED" in output and "NOT REPRODUCED" not in output


def test_another_evaluators_bundle_is_named_as_such_without_the_flag() -> None:
    from typer.testing import CliRunner

    from runner.cli.main import app

    other = [
        b for b in BUNDLES if read_protocol(b).identities.evaluator_digest != evaluator_digest()
    ]
    if not other:
        pytest.skip("every published bundle was made by this evaluator")
    result = CliRunner().invoke(app, ["reproduce", str(other[0])])
    assert result.exit_code == 3
    assert "made by another evaluator" in result.output and "policy_hash" not in result.output


@needs_history
@pytest.mark.uv
@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_one_byte_changed_fails_with_its_own_evaluator_naming_file_and_field(
    bundle: Path, tmp_path: Path
) -> None:
    copy = tmp_path / bundle.name
    shutil.copytree(bundle, copy)
    card = sorted((copy / "results").glob("*/scorecard.json"))[0]  # a subject every bundle has
    data = card.read_bytes()
    found = re.search(rb'"cells":[0-9]', data)
    assert found is not None
    i = found.end() - 1
    card.write_bytes(data[:i] + (b"9" if data[i : i + 1] != b"9" else b"8") + data[i + 1 :])
    code, output = _reproduce_cli(copy)
    assert code == 3, output
    rel = card.relative_to(copy).as_posix()
    assert f"{rel}: first differing field /" in output, output
