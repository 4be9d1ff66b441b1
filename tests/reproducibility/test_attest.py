"""In-toto statements beside each published scorecard: derived, so `bench verify` checks them."""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.shape import ResponseSnapshot
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.attest import (
    FILE_NAME,
    IMAGE_ID_FACTOR,
    IMAGE_INPUTS_FACTOR,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    image_of,
)
from runner.evaluator.publish.load import load_result
from runner.evaluator.publish.results import verify
from runner.runtime.envcollect import observe
from tests.evidence.synth import evaluated_bundle

ROOT = Path(__file__).resolve().parents[2]
EVAL = evaluator_digest()


def _bundle(tmp_path: Path) -> Path:
    return evaluated_bundle(tmp_path, EVAL)


def test_each_scorecard_has_a_statement_binding_its_judgement(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    cards = sorted((bundle / "results").glob("*/scorecard.json"))
    assert cards
    for card_path in cards:
        st = parse_json((card_path.parent / FILE_NAME).read_bytes())
        card = load_result(card_path)
        assert st["_type"] == STATEMENT_TYPE and st["predicateType"] == PREDICATE_TYPE
        (subject,) = st["subject"]
        assert subject["name"] == f"results/{card_path.parent.name}/scorecard.json"
        assert subject["digest"] == {"sha256": hashlib.sha256(card_path.read_bytes()).hexdigest()}
        p = st["predicate"]
        assert p["scorecard_hash"] == card.scorecard_hash()
        assert p["protocol_hash"] == card.protocol_hash
        assert p["evaluator_digest"] == card.evaluator_digest == EVAL
        assert p["evidence_root_hash"] == card.evidence_root_hash
        assert p["environment_conformance_proof_hash"] == card.environment_conformance
    assert verify(bundle, EVAL) == []


def test_a_flipped_byte_in_a_statement_fails_verify(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    st = bundle / "results" / "a" / FILE_NAME
    data = bytearray(st.read_bytes())
    i = data.index(b'"sha256":"') + len(b'"sha256":"')
    data[i] = ord("0") if data[i] != ord("0") else ord("1")
    st.write_bytes(bytes(data))
    problems = verify(bundle, EVAL)
    assert problems == [f"results/a/{FILE_NAME}: differs from what the evidence derives"]
    result = CliRunner().invoke(app, ["verify", str(bundle)])
    assert result.exit_code == 3 and FILE_NAME in result.output, result.output


def test_a_statement_names_the_image_of_the_environment_artifact() -> None:
    spec = load_spec(ROOT / "specs" / "swe-lite.toml")
    ident, inputs = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32
    body = b'[{"Id": "%s", "Labels": {"org.agent-fault-bench.input-digest": "%s"}}]' % (
        ident.encode(),
        inputs.encode(),
    )
    env = observe(
        spec,
        readers={
            "sandbox-image-id": lambda c: ResponseSnapshot(body=body),
            "sandbox-image-input-digest": lambda c: ResponseSnapshot(body=body),
        },
        only=[IMAGE_ID_FACTOR, IMAGE_INPUTS_FACTOR],
    )
    assert image_of(env) == {"id": ident, "input_digest": inputs}
