"""The seams between the runtime and what it runs: subject adapters and the benchmark workload.

A spec's subjects are resolved by their adapter (the part of `agent` before ':') before any
cell runs; an unknown one is an input error naming the subject and the registered adapters.
The reference adapter launches the workload's oracle subject with the oracle view on its own
argv flag; the task file (AFB_TASK_FILE) of every subject, the oracle's too, is the agent view.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from runner.benchmarks.registry import workload_for
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.host import paths
from runner.runtime.subjects.reference import ReferenceAdapter
from runner.runtime.subjects.registry import registered_adapters, resolve_subjects
from runner.runtime.workload import TaskViews

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"


def _smoke() -> Spec:
    """The smoke spec's model (its grader.code list is the lead's to keep current: not read)."""
    raw = tomllib.loads(SMOKE.read_text())
    raw["grader"]["code"] = []
    return Spec.model_validate(raw)


def _with_agent(spec: Spec, agent: str, config: dict[str, object] | None = None) -> Spec:
    first = spec.subjects[0].model_copy(
        update={"agent": agent, "config": spec.subjects[0].config if config is None else config}
    )
    return spec.model_copy(update={"subjects": [first, *spec.subjects[1:]]})


def test_an_unknown_adapter_names_the_subject_and_the_registered_adapters() -> None:
    spec = _with_agent(_smoke(), "mystery:agent")
    assert "reference" in registered_adapters()
    with pytest.raises(InputError) as exc:
        resolve_subjects(spec, SMOKE, workload_for(spec, SMOKE))
    msg = exc.value.render()
    assert "subject 'blind-retry'" in msg and "'mystery:agent'" in msg and "reference:" in msg
    assert exc.value.file == str(SMOKE)


def test_a_reference_subject_needs_a_strategy() -> None:
    spec = _with_agent(_smoke(), "reference:blind_retry", config={})
    with pytest.raises(InputError, match=r"config\.strategy"):
        resolve_subjects(spec, SMOKE, workload_for(spec, SMOKE))


REFERENCE = ROOT / "runner" / "benchmarks" / "swe_lite" / "subjects" / "reference.py"


def test_the_reference_command_gets_the_oracle_view_on_its_own_channel() -> None:
    spec = _smoke()
    workload = workload_for(spec, SMOKE)
    assert workload.image == "swe-lite"
    assert workload.oracle_subject == REFERENCE
    task_id = next(iter(spec.task_index()))
    launch = resolve_subjects(spec, SMOKE, workload)["checkpoint"]
    cmd = launch(TaskViews(task_id, workload))
    script = ReferenceAdapter.public_script(REFERENCE)
    assert script.parent == paths.SUBJECTS_PUBLIC_DIR
    assert script.read_bytes() == REFERENCE.read_bytes()
    oracle = workload.oracle_task(task_id)
    assert list(cmd.argv) == ["/usr/bin/python3", str(script), "--strategy", "checkpoint"]
    assert cmd.oracle == oracle  # -> AFB_ORACLE_FILE, never argv (/proc/<pid>/cmdline)
    assert "gold_patch" in oracle and "fail_to_pass" in oracle
    assert cmd.task == workload.agent_task(task_id)  # the task file: the agent view
    assert "gold_patch" not in cmd.task
    assert dict(cmd.env) == {}


def test_without_a_workload_a_reference_subject_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no oracle"):
        resolve_subjects(_smoke(), SMOKE)


def test_the_reference_config_knows_exactly_the_subjects_strategies() -> None:
    from runner.benchmarks.swe_lite.subjects.reference import STRATEGIES
    from runner.runtime.subjects.reference import REFERENCE_STRATEGIES, ReferenceConfig

    assert REFERENCE_STRATEGIES == STRATEGIES
    field = ReferenceConfig.model_fields["strategy"].annotation
    assert tuple(field.__args__) == STRATEGIES  # type: ignore[union-attr]


def test_a_reference_subject_with_an_unknown_strategy_or_key_is_an_input_error() -> None:
    for config, key in (({"strategy": "yolo"}, "strategy"), ({"strategy": "checkpoint",
                        "max_retries": 3}, "max_retries")):  # fmt: skip
        spec = _with_agent(_smoke(), "reference:x", config=config)
        with pytest.raises(InputError) as exc:
            resolve_subjects(spec, SMOKE, workload_for(spec, SMOKE))
        assert exc.value.key == f"subjects[0].config.{key}", exc.value.render()


AGENTS = ROOT / "specs" / "swe-lite-agents.toml"


def test_a_reference_subject_with_a_model_plans_with_it() -> None:
    """The control of swe-lite-agents: --plan-with-model and the scripted proxy plan per task."""
    spec = load_spec(AGENTS)
    workload = workload_for(spec, AGENTS)
    launch = resolve_subjects(spec, AGENTS, workload)["intent-reconcile-careful"]
    task_id = sorted(spec.task_index())[0]
    cmd = launch(TaskViews(task_id, workload))
    assert "--plan-with-model" in cmd.argv
    assert cmd.argv[cmd.argv.index("--strategy") + 1] == "intent_reconcile"
    assert cmd.model is not None and cmd.model.mode == "scripted"
    assert cmd.model.cassette == (
        ROOT / "specs" / "swe-lite-agents" / "policies" / "control" / "careful" / f"{task_id}.json"
    )


def test_a_reference_model_whose_cassettes_changed_is_an_input_error(tmp_path: Path) -> None:
    spec = load_spec(AGENTS)
    control = next(s for s in spec.subjects if s.id == "intent-reconcile-careful")
    model = {**control.config["model"], "digest": "sha256:" + "0" * 64}
    bad = control.model_copy(update={"config": {**control.config, "model": model}})
    spec = spec.model_copy(update={"subjects": [bad]})
    with pytest.raises(InputError) as exc:
        resolve_subjects(spec, AGENTS, workload_for(spec, AGENTS))
    assert "policies/control/careful" in exc.value.render() and exc.value.key is not None
    assert exc.value.key.endswith("model.digest")


def test_an_unknown_grader_is_an_input_error() -> None:
    spec = load_spec(ROOT / "specs" / "example.toml")
    with pytest.raises(InputError, match="toy-grader"):
        workload_for(spec, ROOT / "specs" / "example.toml")
