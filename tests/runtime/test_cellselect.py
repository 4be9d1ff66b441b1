"""`bench run --only`: the grammar, the cells kept, and every refusal (exit 2, naming the value
and listing the valid ones) before a run directory exists."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.matrix import resolve
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.cellselect import parse_only

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "specs" / "swe-lite-agents.toml"
SPEC = load_spec(AGENTS)
CELLS = list(resolve(SPEC).cells())
TASKS = sorted(SPEC.task_index())
FAULTS = sorted(f.id for f in SPEC.faults)


def kept(*values: str) -> list[tuple[str, str, str]]:
    sel = parse_only(values, SPEC)
    return sorted({(c.task_id, c.fault_id, c.subject_id) for c in CELLS if sel.keeps(c)})


def test_one_task_one_fault() -> None:
    got = kept(f"task={TASKS[0]},fault=lost-submit-response")
    assert got == sorted((TASKS[0], "lost-submit-response", s.id) for s in SPEC.subjects)


def test_values_of_a_key_or_keys_and_options_add_up() -> None:
    a = kept(f"task={TASKS[0]},{TASKS[1]},fault=baseline", "fault=lost-model-response")
    assert {t for t, _, _ in a} == {TASKS[0], TASKS[1]}
    assert {f for _, f, _ in a} == {"none", "lost-model-response"}
    assert a == kept(f"task={TASKS[0]}", f"task={TASKS[1]}", "fault=none,lost-model-response")
    assert kept("subject=intent-reconcile-careful") == sorted(
        {
            (c.task_id, c.fault_id, c.subject_id)
            for c in CELLS
            if c.subject_id == "intent-reconcile-careful"
        }
    )


@given(st.sets(st.sampled_from(TASKS), min_size=1), st.sets(st.sampled_from(FAULTS), min_size=1))
def test_a_selection_keeps_exactly_its_product(tasks: set[str], faults: set[str]) -> None:
    sel = parse_only([f"task={','.join(sorted(tasks))},fault={','.join(sorted(faults))}"], SPEC)
    for c in CELLS:
        assert sel.keeps(c) == (c.task_id in tasks and c.fault_id in faults)


@pytest.mark.parametrize(
    ("value", "named", "listed"),
    [
        ("task=no-such-task", "'no-such-task'", TASKS[0]),
        ("fault=lost-submit", "'lost-submit'", "lost-submit-response"),
        ("subject=nobody", "'nobody'", "mini-swe-agent"),
        ("seed=99", "'99'", "valid seed values"),
        ("flavour=x", "'flavour'", "task, fault, subject, seed"),
        ("lost-submit-response", "names no key", "KEY=VALUE"),
    ],
)
def test_unknown_values_are_named_with_the_valid_ones(value: str, named: str, listed: str) -> None:
    with pytest.raises(InputError) as e:
        parse_only([value], SPEC)
    assert named in str(e.value) and listed in str(e.value)


def test_cli_refuses_before_anything_is_written(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "runs"
    bad = runner.invoke(app, ["run", str(AGENTS), "--draft", "--out", str(out),
                              "--only", "task=nope"])  # fmt: skip
    assert bad.exit_code == 2, bad.output
    assert "nope" in bad.output and TASKS[0] in bad.output
    # a subset is always a draft: refused without --draft, even for a frozen spec
    nodraft = runner.invoke(app, ["run", str(AGENTS), "--out", str(out),
                                  "--only", f"task={TASKS[0]}"])  # fmt: skip
    assert nodraft.exit_code == 2 and "--draft" in nodraft.output
    assert not out.exists()


def test_a_subset_of_a_frozen_spec_records_no_freeze(tmp_path: Path) -> None:
    """The run directory of a subset is a draft's for good: no freeze record, so neither this
    evaluation nor a later full `--resume` can mint a scorecard from it."""
    from runner.benchmarks.registry import workload_for
    from runner.runtime.executor import MatrixRun
    from runner.runtime.prepared import SpecSource, prepare
    from tests.subjects.agents import TASK, make_spec, subject_block

    spec = make_spec(tmp_path, subject_block("intent-reconcile"))
    frozen = CliRunner().invoke(app, ["freeze", str(spec)])
    assert frozen.exit_code == 0, frozen.output
    prepared = prepare(SpecSource.read(spec))
    workload = workload_for(prepared.spec, spec)
    whole = MatrixRun.create(prepared, tmp_path / "o1", "aaaaaaaa", False, workload)
    assert whole.rp.freeze_record is not None
    part = MatrixRun.create(prepared, tmp_path / "o2", "bbbbbbbb", True, workload, draft_only=True)
    assert part.rp.freeze_record is None
    assert part.rp.identities.protocol_hash == whole.rp.identities.protocol_hash
    # nor can a subset be taken of a frozen run by resuming it with --only
    from runner.orchestrate import RunOptions, run_spec

    with pytest.raises(InputError) as e:
        options = RunOptions(
            tmp_path / "o3", resume=whole.run_dir, draft=True, only=(f"task={TASK}",)
        )
        run_spec(spec, options)
    assert "frozen" in str(e.value) and not list(whole.run_dir.glob("journals/*-a*.jsonl"))
