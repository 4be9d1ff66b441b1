"""Subject adapters are runtime only and found like fault kinds: one module each, discovered on
first use; the evaluator hashes a subject's config as declared and reads none of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import load_declaration
from runner.evaluator.core.types import StrictFrozen
from runner.evaluator.protocol.matrix import subject_config_hash
from runner.evaluator.protocol.spec import Subject
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.schemas import SUBJECT_SCHEMAS, runtime_schema_sets
from runner.runtime.subjects.registry import (
    Launch,
    ResolveContext,
    check_subject_configs,
    register_adapter,
    unregister_adapter,
)

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"


def test_adapters_are_discovered_from_their_modules() -> None:
    code = (
        "from runner.runtime.subjects.registry import registered_adapters\n"
        "print(','.join(registered_adapters()))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert proc.stdout.strip() == "command,mini-swe-agent,reference"


def test_no_subject_or_cassette_code_is_an_evaluator_input() -> None:
    paths = load_declaration(ROOT).paths
    assert not [p for p in paths if p.startswith("runner/runtime")]
    assert not list((ROOT / "runner" / "evaluator").rglob("cassette*.py"))
    assert not list((ROOT / "runner" / "evaluator").rglob("policy.py"))


class _EchoConfig(StrictFrozen):
    words: list[str] = Field(min_length=1)


class _EchoAdapter:
    config = _EchoConfig

    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:  # pragma: no cover
        raise AssertionError("plan checks never resolve")


@pytest.fixture
def echo_adapter() -> object:
    register_adapter("echo", _EchoAdapter())
    yield
    unregister_adapter("echo")


def test_a_new_adapter_is_checked_at_plan_and_gets_a_schema(echo_adapter: object) -> None:
    spec = load_spec(SMOKE)
    good = Subject(id="e", agent="echo:1", config={"words": ["hi"]})
    check_subject_configs(spec.model_copy(update={"subjects": [good]}), SMOKE)
    bad = Subject(id="e", agent="echo:1", config={"words": []})
    with pytest.raises(InputError) as err:
        check_subject_configs(spec.model_copy(update={"subjects": [bad]}), SMOKE)
    assert err.value.key == "subjects[0].config.words" and err.value.file == str(SMOKE)
    assert runtime_schema_sets()[SUBJECT_SCHEMAS]["subject-echo-config"] is _EchoConfig
    # the evaluator's identity of a subject is its declared config, whatever the adapter says
    assert subject_config_hash(bad) != subject_config_hash(good)


def test_an_unknown_adapter_is_refused_at_plan() -> None:
    spec = load_spec(SMOKE)
    nope = Subject(id="n", agent="nope:1", config={})
    with pytest.raises(InputError, match="no subject adapter for agent 'nope:1'"):
        check_subject_configs(spec.model_copy(update={"subjects": [nope]}), SMOKE)
