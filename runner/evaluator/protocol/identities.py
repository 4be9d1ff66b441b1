"""Content-addressed identities of a protocol (DESIGN §6), all `sha256:` over RFC 8785 bytes.

protocol_hash binds the *rules* (matrix, policy, evaluator, witness contracts, task-grader
identity, controlled-factor rules); observed environment values never enter it, and neither does
the subject, which is what a comparison intentionally varies.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from runner.evaluator.core.bounded import TASK_FILE_CAP
from runner.evaluator.core.canonical import digest
from runner.evaluator.core.inputs import evaluator_digest, project_root
from runner.evaluator.core.nar import nar_sha256
from runner.evaluator.core.types import Frozen

from .matrix import ResolvedMatrix, cell_set_hash, matrix_hash, resolve
from .spec import Spec
from .specload import spec_base
from .witness import WitnessContract, contracts_hash, load_contracts

SCHEMA_VERSIONS = {
    "spec": "afb.spec/1",
    "matrix": "afb.matrix/1",
    "policy": "afb.policy/1",
    "witness": "afb.witness/1",
    "evidence": "afb.evidence/1",
    "proof": "afb.proof/3",
    "scorecard": "afb.scorecard/3",
    "report": "afb.report/2",
    "environment": "afb.environment/1",
}


class Identities(Frozen):
    protocol_id: str
    protocol_version: str
    protocol_hash: str
    matrix_hash: str
    policy_hash: str
    evaluator_digest: str
    witness_contracts_hash: str
    task_grader_identity: str
    controlled_factors_hash: str
    cell_set_hash: str
    subject_config_hashes: dict[str, str]


def controlled_factors_body(spec: Spec) -> dict[str, Any]:
    return {
        "factors": sorted((f.model_dump(mode="json") for f in spec.factors), key=lambda f: f["id"]),
        "sources": sorted((s.model_dump(mode="json") for s in spec.sources), key=lambda s: s["id"]),
    }


def policy_body(spec: Spec) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSIONS["policy"],
        "schema_versions": SCHEMA_VERSIONS,
        "attempts": spec.attempts.model_dump(mode="json"),
        "eligibility": spec.eligibility.model_dump(mode="json"),
        "applicability": {
            f.id: f.applies_to.model_dump(mode="json")
            for f in sorted(spec.faults, key=lambda f: f.id)
        },
        "scoring": spec.scoring.model_dump(mode="json"),
        "comparison": spec.comparison.model_dump(mode="json"),
        "publication": spec.publication.model_dump(mode="json"),
        "controlled_factors": controlled_factors_body(spec),
    }


def _file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def task_grader_identity(spec: Spec, spec_path: Path, root: Path) -> str:
    """Grader code + sandbox image inputs + every task's test specs (its folder, as a NAR)."""
    base = spec_base(spec_path)
    tests = {}
    for task_id, (_, task) in sorted(spec.task_index().items()):
        tree = base / task.path if task.path else None
        tests[task_id] = "sha256:" + nar_sha256(tree, file_cap=TASK_FILE_CAP) if tree else None
    image = None
    if spec.grader.image:
        image = {
            "name": spec.grader.image,
            "inputs": "sha256:" + nar_sha256(root / "images" / spec.grader.image),
        }
    return digest(
        {
            "grader": {"id": spec.grader.id, "version": spec.grader.version},
            "code": {c: _file_digest(root / c) for c in spec.grader.code},
            "image": image,
            "tests": tests,
        }
    )


PROTOCOL_PARTS = (
    "matrix_hash",
    "policy_hash",
    "evaluator_digest",
    "witness_contracts_hash",
    "task_grader_identity",
    "controlled_factors_hash",
)


def protocol_root(protocol_id: str, version: str, parts: dict[str, str]) -> str:
    """protocol_hash: the root over the protocol's parts (PROTOCOL_PARTS)."""
    body: dict[str, str] = {"schema": "afb.protocol/1", "protocol_id": protocol_id}
    body["protocol_version"] = version
    body.update({k: parts[k] for k in PROTOCOL_PARTS})
    return digest(body)


def verify(ids: Identities) -> bool:
    """Does `ids.protocol_hash` really root its parts? (catches an edited record)"""
    parts = {k: getattr(ids, k) for k in PROTOCOL_PARTS}
    return protocol_root(ids.protocol_id, ids.protocol_version, parts) == ids.protocol_hash


def compute(
    spec: Spec,
    spec_path: Path,
    matrix: ResolvedMatrix | None = None,
    contracts: dict[Any, WitnessContract] | None = None,
    root: Path | None = None,
    evaluator: str | None = None,
) -> Identities:
    """All identities of a spec; `evaluator` overrides the digest (known-answer vectors only)."""
    root = root or project_root()
    matrix = matrix or resolve(spec)
    contracts = contracts if contracts is not None else load_contracts(root / "witnesses")
    parts = {
        "matrix_hash": matrix_hash(spec, matrix.slots),
        "policy_hash": digest(policy_body(spec)),
        "evaluator_digest": evaluator or evaluator_digest(root),
        "witness_contracts_hash": contracts_hash(contracts),
        "task_grader_identity": task_grader_identity(spec, spec_path, root),
        "controlled_factors_hash": digest(controlled_factors_body(spec)),
    }
    protocol_hash = protocol_root(spec.protocol.id, spec.protocol.version, parts)
    return Identities(
        protocol_id=spec.protocol.id,
        protocol_version=spec.protocol.version,
        protocol_hash=protocol_hash,
        cell_set_hash=cell_set_hash([s.slot_id for s in matrix.slots]),
        subject_config_hashes=dict(matrix.subjects),
        **parts,
    )
