"""What a hash must and must not depend on (DESIGN §6, issue 2 "Must hold")."""

from __future__ import annotations

import copy
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.identities import Identities, compute
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.protocol.witness import load_contracts
from tests.foundation.helpers import FIXED_EVALUATOR, REPO, copy_example, example_raw, toml_dumps

CONTRACTS = load_contracts(REPO / "witnesses")
HASHES = (
    "protocol_hash",
    "matrix_hash",
    "policy_hash",
    "witness_contracts_hash",
    "task_grader_identity",
    "controlled_factors_hash",
    "cell_set_hash",
    "subject_config_hashes",
)


def identities(path: Path, contracts: Any = None) -> tuple[Identities, list[str]]:
    spec = load_spec(path)
    matrix = resolve(spec)
    ids = compute(spec, path, matrix, contracts=contracts or CONTRACTS, evaluator=FIXED_EVALUATOR)
    return ids, sorted(c.cell_id for c in matrix.cells())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("inv")
    copy_example(d)
    return d


@pytest.fixture(scope="module")
def baseline(workdir: Path) -> tuple[Identities, list[str]]:
    path = workdir / "baseline.toml"
    path.write_text(toml_dumps(example_raw()), "utf-8")
    ids, cells = identities(path)
    assert ids == identities(copy_example(workdir))[0]  # the writer itself changes nothing
    return ids, cells


def write(workdir: Path, raw: dict[str, Any], name: str = "variant.toml") -> Path:
    path = workdir / name
    path.write_text(toml_dumps(raw), "utf-8")
    return path


# -------------------------------------------------------------------------- reordering

SET_ARRAYS: list[Callable[[dict[str, Any]], list[list[Any]]]] = [
    lambda r: [r["tools"], r["task_sets"], r["subjects"], r["faults"], r["sources"], r["factors"]],
    lambda r: [ts["tasks"] for ts in r["task_sets"]] + [ts["buckets"] for ts in r["task_sets"]],
    lambda r: [r["matrix"]["seeds"], r["attempts"]["retry_on"], r["eligibility"]["strata"]],
    lambda r: [r["scoring"]["measures"], r["comparison"]["require_equal"]],
    lambda r: [r["publication"]["outputs"]],
    lambda r: [f["applies_to"]["buckets"] for f in r["faults"] if "applies_to" in f],
    lambda r: [v for f in r["factors"] if "classes" in f for v in f["classes"].values()],
]


def _shuffle_tables(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffle_tables(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffle_tables(v, rng) for v in value]
    return value


def permuted(raw: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["publication"]["outputs"] = ["markdown", "json"]
    raw["matrix"]["seeds"] = [5, 1, 2, 9]
    for arrays in SET_ARRAYS:
        for array in arrays(raw):
            rng.shuffle(array)
    return _shuffle_tables(raw, rng)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rng=st.randoms(use_true_random=False))
def test_reordering_sets_and_tables_changes_no_hash(workdir: Path, rng: random.Random) -> None:
    raw = example_raw()
    raw["matrix"]["seeds"] = [1, 2, 5, 9]
    reference = identities(write(workdir, raw, "ordered.toml"))
    variant = permuted(raw, rng)
    got = identities(write(workdir, variant))
    for key in HASHES:
        assert getattr(got[0], key) == getattr(reference[0], key), key
    assert got[1] == reference[1]


def test_reordering_the_example_text_changes_no_hash(workdir: Path) -> None:
    # Move whole TOML tables around in the real file (not the test writer).
    text = (REPO / "specs" / "example.toml").read_text("utf-8")
    head, _sep, rest = text.partition("[matrix]")
    matrix_block, sep2, tail = rest.partition("[attempts]")
    moved = head.replace("[protocol]", "[matrix]" + matrix_block + "[protocol]", 1) + sep2 + tail
    assert moved.count("[matrix]") == 1 and moved != text
    a = identities(copy_example(workdir))
    b = identities(copy_example(workdir, moved, "moved.toml"))
    assert a == b


# ------------------------------------------------------------------ rule changes change hashes


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(raw: dict[str, Any]) -> None:
        node: Any = raw
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node[p]
        last = parts[-1]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return apply


POLICY_CHANGES = {
    "eligibility_strata": _set("eligibility.strata", ["fault_kind"]),
    "not_comparable_after": _set("eligibility.not_comparable_after_invalid_attempts", 3),
    "retry_on": _set("attempts.retry_on", ["HARNESS_INVALID"]),
    "attempt_cap": _set("attempts.cap", 4),
    "scorer_version": _set("scoring.scorer_version", "2"),
    "measures": _set("scoring.measures", ["completion", "duplicate_effects"]),
    "comparison": _set("comparison.require_distinct_subjects", False),
    "publication": _set("publication.outputs", ["json"]),
    "applicability": _set("faults.3.applies_to", {"buckets": ["easy"]}),
    "factor_tolerance": _set("factors.2.tolerance", {"relative_percent": 51}),
    "factor_pair_tolerance": _set("factors.2.overhead_pair_tolerance", {"relative_percent": 21}),
    "factor_class_value": _set("factors.1.classes", {"modern": ["6.1", "6.6", "6.12", "6.19"]}),
    "factor_match": _set("factors.0.match", "tolerance"),
    "source_endpoint": _set("sources.0.endpoint", "os.process_cpu_count"),
    "source_parser": _set("sources.1.parser", "text@2"),
    "source_normalizer": _set("sources.1.normalizer", "major_minor@2"),
    "source_shape": _set("sources.1.shape", {"parse": "text", "non_empty": True, "max_bytes": 257}),
}


@pytest.mark.parametrize("name", sorted(POLICY_CHANGES))
def test_policy_rule_change_changes_policy_and_protocol_hash(
    workdir: Path, baseline: tuple[Identities, list[str]], name: str
) -> None:
    raw = example_raw()
    POLICY_CHANGES[name](raw)
    if name == "factor_match":
        raw["factors"][0]["tolerance"] = {"absolute": 0}
    ids, _ = identities(write(workdir, raw))
    assert ids.policy_hash != baseline[0].policy_hash
    assert ids.protocol_hash != baseline[0].protocol_hash
    assert ids.subject_config_hashes == baseline[0].subject_config_hashes
    if name.startswith(("factor", "source")):
        assert ids.controlled_factors_hash != baseline[0].controlled_factors_hash


# Settings with one value (issue 13): the key is accepted, any other value is refused.
SINGLE_VALUE = {
    "eligibility_floor": _set("eligibility.witnessed_coverage_floor_percent", 99),
    "eligibility_require_frozen": _set("eligibility.require_frozen", False),
    "publication_require_frozen": _set("publication.require_frozen", False),
    "outputs_without_json": _set("publication.outputs", ["markdown"]),
}


@pytest.mark.parametrize("name", sorted(SINGLE_VALUE))
def test_single_value_policy_settings_refuse_other_values(workdir: Path, name: str) -> None:
    raw = example_raw()
    SINGLE_VALUE[name](raw)
    with pytest.raises(InputError):
        identities(write(workdir, raw))


MATRIX_CHANGES = {
    "trigger_ordinal": _set(
        "faults.0.trigger", {"tool": "submit_patch", "ordinal": 2, "phase": "effect_done"}
    ),
    "fault_parameter": _set("faults.2.parameters", {"release_after_blocked_attempts": 2}),
    "seed": _set("matrix.seeds", [1, 3]),
    "baseline": _set("matrix.baseline", False),
    "task_bucket": _set("task_sets.0.tasks.1.bucket", "easy"),
    "tool_irreversible": _set("tools.0.irreversible", True),
}


@pytest.mark.parametrize("name", sorted(MATRIX_CHANGES))
def test_matrix_change_changes_matrix_and_protocol_hash(
    workdir: Path, baseline: tuple[Identities, list[str]], name: str
) -> None:
    raw = example_raw()
    MATRIX_CHANGES[name](raw)
    ids, _ = identities(write(workdir, raw))
    assert ids.matrix_hash != baseline[0].matrix_hash
    assert ids.protocol_hash != baseline[0].protocol_hash


def test_default_written_explicitly_hashes_the_same(
    workdir: Path, baseline: tuple[Identities, list[str]]
) -> None:
    raw = example_raw()
    raw["faults"][1]["parameters"] = {"endpoint": "destination"}  # the default, written out
    raw["faults"][2]["parameters"] = {}  # release_after_blocked_attempts = 1 is the default
    ids, cells = identities(write(workdir, raw))
    assert ids == baseline[0] and cells == baseline[1]


def test_descriptions_do_not_change_hashes(
    workdir: Path, baseline: tuple[Identities, list[str]]
) -> None:
    raw = example_raw()
    raw["protocol"]["description"] = "reworded"
    raw["tools"][4]["description"] = "reworded"
    ids, _ = identities(write(workdir, raw))
    assert ids == baseline[0]


@pytest.mark.parametrize(
    "edit",
    [
        ("sigkill_mid_tool_call.json", '"const": 9', '"const": 15'),
        ("lost_response.json", '"description": "', '"description": "X'),
    ],
    ids=["predicate-constant", "description-byte"],
)
def test_witness_contract_change_changes_protocol_hash(
    tmp_path: Path, baseline: tuple[Identities, list[str]], edit: tuple[str, str, str]
) -> None:
    witnesses = tmp_path / "witnesses"
    shutil.copytree(REPO / "witnesses", witnesses)
    unchanged = load_contracts(witnesses)
    fname, old, new = edit
    text = (witnesses / fname).read_text("utf-8")
    assert old in text
    (witnesses / fname).write_text(text.replace(old, new, 1), "utf-8")
    path = REPO / "specs" / "example.toml"
    same, _ = identities(path, unchanged)
    changed, _ = identities(path, load_contracts(witnesses))
    assert same.protocol_hash == baseline[0].protocol_hash
    assert changed.witness_contracts_hash != baseline[0].witness_contracts_hash
    assert changed.protocol_hash != baseline[0].protocol_hash
    assert changed.matrix_hash == baseline[0].matrix_hash


def test_witness_observation_order_is_a_set(tmp_path: Path) -> None:
    witnesses = tmp_path / "witnesses"
    shutil.copytree(REPO / "witnesses", witnesses)
    f = witnesses / "sigkill_mid_tool_call.json"
    doc = json.loads(f.read_text("utf-8"))
    doc["observations"].reverse()
    f.write_text(json.dumps(doc, indent=4), "utf-8")
    path = REPO / "specs" / "example.toml"
    assert identities(path, load_contracts(witnesses))[0] == identities(path)[0]


def test_subject_config_change_changes_only_its_subject_hash(
    workdir: Path, baseline: tuple[Identities, list[str]]
) -> None:
    raw = example_raw()
    raw["subjects"][0]["config"]["max_retries"] = 4
    ids, cells = identities(write(workdir, raw))
    before = baseline[0]
    sid = raw["subjects"][0]["id"]
    other = raw["subjects"][1]["id"]
    assert ids.subject_config_hashes[sid] != before.subject_config_hashes[sid]
    assert ids.subject_config_hashes[other] == before.subject_config_hashes[other]
    assert ids.protocol_hash == before.protocol_hash
    assert ids.matrix_hash == before.matrix_hash and ids.cell_set_hash == before.cell_set_hash
    # The cells of the changed subject get new ids; the other subject's cells keep theirs.
    assert len(set(cells) & set(baseline[1])) == len(cells) // 2


def test_subject_id_is_not_part_of_its_config_hash(
    workdir: Path, baseline: tuple[Identities, list[str]]
) -> None:
    raw = example_raw()
    raw["subjects"][0]["id"] = "renamed"
    ids, _ = identities(write(workdir, raw))
    old = baseline[0].subject_config_hashes[example_raw()["subjects"][0]["id"]]
    assert ids.subject_config_hashes["renamed"] == old
    assert ids.protocol_hash == baseline[0].protocol_hash


def test_strata_and_cell_counts() -> None:
    spec: Spec = load_spec(REPO / "specs" / "example.toml")
    m = resolve(spec)
    assert m.cell_count == 2 * 5 * 2 * 2  # tasks x (4 faults + baseline) x seeds x subjects
    assert len({c.cell_id for c in m.cells()}) == m.cell_count
    assert len({s.slot_id for s in m.slots}) == len(m.slots)
    strata = {s.stratum for s in m.slots}
    assert "fault_kind=none,task_bucket=easy" in strata and len(strata) == 10
    assert all(s.schedule.trigger is None for s in m.slots if s.schedule.fault_id == "none")
