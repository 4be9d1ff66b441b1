"""Provenance of a published scorecard as an in-toto Statement v1.

results/<subject>/scorecard.intoto.json is derived like every other result file, so `bench verify`
and `bench reproduce` re-derive it byte for byte. Its subject is scorecard.json by the SHA-256 of
its bytes; its predicate binds what the scorecard was judged under: the protocol, the evaluator,
the evidence root, the environment conformance proof and the sandbox image(s) the run's
environment artifacts name. The statement file itself is unsigned (it is a derived result, the
same on every machine); the runner signs its bytes as a DSSE envelope beside the evidence,
signatures/<subject>.scorecard.dsse.json (runner/signing/sign.py; checked by
runner/evaluator/trust/run.py).

Statement layout: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from runner.evaluator.core.canonical import canonical_bytes, parse_json
from runner.evaluator.core.errors import EvidenceError
from runner.evaluator.environment.artifact import (
    ExecutionEnvironment,
    load_environment,
)
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence

from .models import PublishableScorecard

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:agent-fault-bench:predicate:scorecard-provenance:v1"
FILE_NAME = "scorecard.intoto.json"
# The controlled factors that name the sandbox image (specs/swe-lite.toml, docs/ENVIRONMENT.md).
IMAGE_ID_FACTOR = "sandbox_image_id"
IMAGE_INPUTS_FACTOR = "sandbox_image_input_digest"

Image = dict[str, str | None]


def image_of(env: ExecutionEnvironment) -> Image | None:
    """The image an environment artifact names (raw observed values), or None if it names none."""
    ident, inputs = env.observation(IMAGE_ID_FACTOR), env.observation(IMAGE_INPUTS_FACTOR)
    if ident is None and inputs is None:
        return None
    return {
        "id": None if ident is None or ident.raw_value is None else str(ident.raw_value),
        "input_digest": None
        if inputs is None or inputs.raw_value is None
        else str(inputs.raw_value),
    }


def images_of(evidence: LoadedEvidence, store: EvidenceStore) -> list[Image]:
    """Every distinct image the run's environment artifacts name, sorted. An unreadable artifact
    is skipped here: the environment check already refuses it by reason code."""
    found: dict[bytes, Image] = {}
    for rec in evidence.environment:
        try:
            env = load_environment(parse_json(store.get_blob(rec.artifact)))
        except (EvidenceError, ValueError):
            continue
        image = image_of(env)
        if image is not None:
            found[canonical_bytes(image)] = image
    return [found[k] for k in sorted(found)]


def statement(scorecard_file: str, scorecard_bytes: bytes, card: PublishableScorecard,
              images: Sequence[Image]) -> dict[str, Any]:  # fmt: skip
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": scorecard_file,
                "digest": {"sha256": hashlib.sha256(scorecard_bytes).hexdigest()},
            }
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "scorecard_hash": card.scorecard_hash(),
            "subject_id": card.subject_id,
            "protocol_id": card.protocol_id,
            "protocol_hash": card.protocol_hash,
            "evaluator_digest": card.evaluator_digest,
            "evidence_root_hash": card.evidence_root_hash,
            "environment_conformance_proof_hash": card.environment_conformance,
            "execution_environment_hash": card.execution_environment_hash,
            "sandbox_images": list(images),
        },
    }


def statements(
    files: dict[str, bytes], cards: Iterable[tuple[str, PublishableScorecard]],
    images: Sequence[Image],
) -> dict[str, bytes]:  # fmt: skip
    """The statement file of each (results/<subject>/ prefix, scorecard) already in `files`."""
    out: dict[str, bytes] = {}
    for base, card in cards:
        name = base + "scorecard.json"
        out[base + FILE_NAME] = canonical_bytes(statement(name, files[name], card, images)) + b"\n"
    return out
