"""The committed JSON Schemas equal what the models generate (`uv run bench schema` fixes drift)."""

from __future__ import annotations

import json
from pathlib import Path

from runner.evaluator.schemas import MODELS, write_schemas
from runner.runtime.schemas import CASSETTE_SCHEMAS, SUBJECT_SCHEMAS, runtime_schema_sets
from tests.foundation.helpers import REPO, bench


def test_committed_schemas_do_not_drift() -> None:
    drift = write_schemas(REPO / "schemas", check=True)
    assert drift == [], f"schemas drifted, run `uv run bench schema`: {drift}"
    for folder, models in runtime_schema_sets().items():
        drift = write_schemas(REPO / folder, check=True, models=models)
        assert drift == [], f"{folder} drifted, run `uv run bench schema`: {drift}"


def test_subject_and_cassette_schemas_are_not_evaluator_inputs() -> None:
    """A new adapter or cassette version must not move evaluator_digest: their schemas live
    beside their runtime models, outside schemas/ (an evaluator input)."""
    sets = runtime_schema_sets()
    assert set(sets[SUBJECT_SCHEMAS]) == {
        "subject-command-config",
        "subject-mini-swe-agent-config",
        "subject-reference-config",
        "subject-env",
    }
    assert set(sets[CASSETTE_SCHEMAS]) == {"model-cassette", "model-policy-cassette"}
    assert not any(n.startswith(("subject-", "model-")) for n in MODELS)
    assert not list((REPO / "schemas").glob("subject-*")) + list((REPO / "schemas").glob("model-*"))


def test_schema_command_writes_every_model(tmp_path: Path) -> None:
    result = bench("schema", "--directory", tmp_path)
    assert result.exit_code == 0
    names = sorted(p.name for p in tmp_path.glob("*.schema.json"))
    assert names == sorted(f"{n}.schema.json" for n in MODELS)
    for folder, models in runtime_schema_sets().items():
        written = sorted(p.name for p in (tmp_path / folder).glob("*.schema.json"))
        assert written == sorted(f"{n}.schema.json" for n in models)
    spec_schema = json.loads((tmp_path / "spec.schema.json").read_text())
    assert "schema" in spec_schema["properties"]  # the alias, as written in TOML
    assert bench("schema", "--directory", tmp_path, "--check").exit_code == 0
    (tmp_path / "spec.schema.json").write_text("{}")
    (tmp_path / "stale.schema.json").write_text("{}")
    check = bench("schema", "--directory", tmp_path, "--check")
    assert check.exit_code == 1 and "spec.schema.json" in check.stdout
    assert "stale.schema.json" in check.stdout
