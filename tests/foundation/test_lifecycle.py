"""Draft -> frozen -> amendment required -> amended; a tampered freeze log is an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.evaluator.core.canonical import canonical_bytes
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol import freeze as freezing
from tests.foundation.helpers import bench, copy_example

PLAN_KEYS = {"protocol_hash", "matrix_hash", "policy_hash", "evaluator_digest", "cells", "status"}


def plan_json(spec: Path) -> dict[str, object]:
    result = bench("plan", spec, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    return doc


def test_plan_json_top_level_keys(tmp_path: Path) -> None:
    doc = plan_json(copy_example(tmp_path))
    assert set(doc) >= PLAN_KEYS
    assert doc["cells"] == 40 and doc["status"] == "draft"
    for key in PLAN_KEYS - {"cells", "status"}:
        value = doc[key]
        assert isinstance(value, str) and value.startswith("sha256:") and len(value) == 71
    assert sum(doc["strata"].values()) == 40  # type: ignore[union-attr]


def test_plan_human_output(tmp_path: Path) -> None:
    result = bench("plan", copy_example(tmp_path))
    assert result.exit_code == 0
    assert "example 1.0.0: draft" in result.stdout
    assert "40 cells (20 slots x 2 subjects)" in result.stdout
    assert "fault_kind=none,task_bucket=easy" in result.stdout
    for name in ("protocol_hash", "matrix_hash", "policy_hash", "evaluator_digest"):
        assert name in result.stdout
    assert "subject_config_hash[reconcile]" in result.stdout


def test_freeze_lifecycle(tmp_path: Path) -> None:
    spec = copy_example(tmp_path)
    log = tmp_path / "example.freeze.jsonl"
    assert plan_json(spec)["status"] == "draft"

    result = bench("freeze", spec)
    assert result.exit_code == 0, result.output
    first = plan_json(spec)
    assert first["status"] == "frozen"
    assert "example 1.0.0: frozen" in bench("plan", spec).stdout

    # Freezing again is a no-op.
    assert bench("freeze", spec).exit_code == 0
    assert len(log.read_bytes().splitlines()) == 1

    spec.write_text(
        spec.read_text().replace(
            "not_comparable_after_invalid_attempts = 2", "not_comparable_after_invalid_attempts = 3"
        )
    )
    changed = plan_json(spec)
    assert changed["status"] == "amendment_required"
    assert changed["protocol_hash"] != first["protocol_hash"]
    assert "frozen protocol changed: amendment required" in bench("plan", spec).stdout

    # freeze refuses; amend needs a reason
    refused = bench("freeze", spec)
    assert refused.exit_code == 2 and "bench amend" in refused.stderr
    assert bench("amend", spec).exit_code == 2  # --reason is required
    assert bench("amend", spec, "--reason", "  ").exit_code == 2

    result = bench("amend", spec, "--reason", "not comparable after 3")
    assert result.exit_code == 0, result.output
    assert plan_json(spec)["status"] == "frozen"

    records = freezing.read_log(spec)
    assert [r.type for r in records] == ["freeze", "amendment"]
    assert records[1].parent_protocol_hash == first["protocol_hash"]
    assert records[1].protocol_hash == changed["protocol_hash"]
    assert records[1].reason == "not comparable after 3"
    assert records[1].previous_record is not None

    nothing = bench("amend", spec, "--reason", "again")
    assert nothing.exit_code == 2 and "nothing to amend" in nothing.stderr


def test_amend_a_draft_is_refused(tmp_path: Path) -> None:
    result = bench("amend", copy_example(tmp_path), "--reason", "x")
    assert result.exit_code == 2 and "draft" in result.stderr


def _frozen_twice(tmp_path: Path) -> tuple[Path, Path]:
    spec = copy_example(tmp_path)
    assert bench("freeze", spec).exit_code == 0
    spec.write_text(spec.read_text().replace("cap = 3", "cap = 4"))
    assert bench("amend", spec, "--reason", "cap").exit_code == 0
    return spec, tmp_path / "example.freeze.jsonl"


def _edit_record(line: bytes, **changes: object) -> bytes:
    doc = json.loads(line)
    doc.update(changes)
    return canonical_bytes(doc)


@pytest.mark.parametrize(
    "tamper",
    ["reason", "protocol_hash", "recorded_at", "reformat", "drop_first", "swap", "garbage"],
)
def test_tampered_freeze_log_is_an_error(tmp_path: Path, tamper: str) -> None:
    spec, log = _frozen_twice(tmp_path)
    lines = log.read_bytes().splitlines()
    if tamper == "reason":
        lines[1] = _edit_record(lines[1], reason="something else")
    elif tamper == "protocol_hash":
        lines[0] = _edit_record(lines[0], protocol_hash="sha256:" + "1" * 64)
    elif tamper == "recorded_at":
        lines[1] = _edit_record(lines[1], recorded_at="2000-01-01T00:00:00Z")
    elif tamper == "reformat":
        lines[0] = json.dumps(json.loads(lines[0]), indent=None).encode()
    elif tamper == "drop_first":
        lines = lines[1:]
    elif tamper == "swap":
        lines = [lines[1], lines[0]]
    elif tamper == "garbage":
        lines[1] = lines[1][:-10]
    log.write_bytes(b"\n".join(lines) + b"\n")
    # the signed head refuses it first (exit 3), naming the first record that is not the signed one
    result = bench("plan", spec, "--json")
    assert result.exit_code == 3, result.output
    assert str(log) in result.stderr and "record " in result.stderr
    assert "Traceback" not in result.stderr
    assert bench("freeze", spec).exit_code == 3
    # the records' own seals and chain stand without the head too (the reader without an anchor)
    with pytest.raises(InputError) as caught:
        freezing.read_log(spec)
    assert str(log) in caught.value.render() and "line " in caught.value.render()


def test_single_record_log_tampering_is_detected(tmp_path: Path) -> None:
    spec = copy_example(tmp_path)
    assert bench("freeze", spec).exit_code == 0
    log = tmp_path / "example.freeze.jsonl"
    (line,) = log.read_bytes().splitlines()
    log.write_bytes(_edit_record(line, reason="backdated") + b"\n")
    result = bench("plan", spec)
    assert result.exit_code == 3 and "record 1 is not the one" in result.stderr
    with pytest.raises(InputError, match="damaged freeze record"):
        freezing.read_log(spec)
