"""Bad input: exit code 2, the file, the key path, the line, what was expected, no traceback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.specload import load_spec
from tests.foundation.helpers import EXAMPLE, bench, copy_example, line_of

TEXT = EXAMPLE.read_text("utf-8")

EXTRA_FAULT = """
[[faults]]
id = "kill-again"
kind = "sigkill_mid_tool_call"
trigger = { tool = "submit_patch", ordinal = 1, phase = "effect_done" }
"""
EXTRA_SUBJECT = """
[[subjects]]
id = "blind-retry-2"
agent = "reference:blind_retry"
config = { max_retries = 3 }
"""


@dataclass
class Case:
    old: str
    new: str
    key: str | None  # the key path the message must name
    line_needle: str | None  # the message's line is the line holding this text (in the new text)
    says: tuple[str, ...]  # what the message must also say
    occurrence: int = 0


CASES = {
    "malformed_toml": Case("cap = 3", "cap = = 3", None, "cap = = 3", ("malformed TOML",)),
    "unknown_key": Case(
        "cap = 3",
        "cap = 3\nretries = 2",
        "attempts.retries",
        "retries = 2",
        ("unknown key 'retries'", "expected one of: cap, retry_on"),
    ),
    "unknown_table": Case(
        "[matrix]", "[matrixx]", "matrixx", "[matrixx]", ("unknown key", "matrix")
    ),
    "wrong_type": Case(
        "cap = 3", 'cap = "3"', "attempts.cap", 'cap = "3"', ("valid integer", "got '3'")
    ),
    "wrong_type_bool": Case(
        "irreversible = true",
        "irreversible = 1",
        "tools[4].irreversible",
        "irreversible = 1",
        ("valid boolean",),
    ),
    "duplicate_fault_id": Case(
        'id = "lose-submit-response"',
        'id = "kill-after-submit-effect"',
        "faults[1]",
        "[[faults]]",
        ("duplicate fault id 'kill-after-submit-effect'",),
        occurrence=1,
    ),
    "duplicate_task_id": Case(
        '{ id = "toy-sort"',
        '{ id = "toy-add"',
        "task_sets[0].tasks[1]",
        '{ id = "toy-add", bucket = "hard"',
        ("duplicate task id 'toy-add'",),
    ),
    "duplicate_cells_faults": Case(
        "[matrix]",
        EXTRA_FAULT + "\n[matrix]",
        "faults[4]",
        "[[faults]]",
        ("duplicate cells", "'kill-again'", "'kill-after-submit-effect'"),
        occurrence=4,
    ),
    "duplicate_cells_subjects": Case(
        "# set, keyed by id; kind",
        EXTRA_SUBJECT + "\n# set, keyed by id; kind",
        "subjects[2]",
        "[[subjects]]",
        ("duplicate cells", "same agent and config", "'blind-retry'"),
        occurrence=2,
    ),
    "trigger_unknown_tool": Case(
        'trigger = { tool = "submit_patch", ordinal = 1, phase = "dispatched" }',
        'trigger = { tool = "deploy", ordinal = 1, phase = "dispatched" }',
        "faults[1].trigger.tool",
        'tool = "deploy"',
        ("unknown tool 'deploy'", "submit_patch"),
    ),
    "unknown_phase": Case(
        'phase = "dispatched"',
        'phase = "after_dispatch"',
        "faults[1].trigger.phase",
        "after_dispatch",
        ("'received', 'dispatched', 'effect_done' or 'response_sent'", "after_dispatch"),
    ),
    "zero_attempt_cap": Case(
        "cap = 3", "cap = 0", "attempts.cap", "cap = 0", ("greater than or equal to 1",)
    ),
    "seed_out_of_range": Case(
        "seeds = [1, 2]",
        "seeds = [1, 9007199254740992]",
        "matrix.seeds[1]",
        "seeds = [1, 9007199254740992]",
        ("outside ±(2^53-1)",),
    ),
    "ordinal_out_of_range": Case(
        'ordinal = 1, phase = "dispatched"',
        'ordinal = 0, phase = "dispatched"',
        "faults[1].trigger.ordinal",
        "ordinal = 0",
        ("greater than or equal to 1",),
    ),
    "task_path_escapes": Case(
        'path = "example-tasks/toy-add"',
        'path = "../x"',
        "task_sets[0].tasks[0].path",
        'path = "../x"',
        ("escapes the spec's folder", "'../x'"),
    ),
    "task_path_absolute": Case(
        'path = "example-tasks/toy-add"',
        'path = "/etc"',
        "task_sets[0].tasks[0].path",
        'path = "/etc"',
        ("escapes the spec's folder",),
    ),
    "retry_subject_outcome": Case(
        'retry_on = ["INVALID_INJECTION", "HARNESS_INVALID"]',
        'retry_on = ["INVALID_INJECTION", "FAILED"]',
        "attempts.retry_on",
        "retry_on = ",
        ("FAILED is a subject outcome", "only INVALID_INJECTION and HARNESS_INVALID"),
    ),
    "undeclared_bucket": Case(
        '{ id = "toy-sort", bucket = "hard" }',
        '{ id = "toy-sort", bucket = "medium" }',
        "task_sets[0].tasks[1].bucket",
        'bucket = "medium"',
        ("'medium'", "['easy', 'hard']"),
    ),
    "missing_key": Case(
        'scorer_version = "1"\n', "", "scoring.scorer_version", "[scoring]", ("required key",)
    ),
    "toml_date": Case(
        'version = "1.0.0"',
        "version = 1979-05-27",
        "protocol.version",
        "version = 1979-05-27",
        ("no JSON representation", "quote dates"),
    ),
    "baseline_fault_declared": Case(
        'kind = "lost_response"',
        'kind = "none"',
        "faults[1]",
        "[[faults]]",
        ("'none' is implicit",),
        occurrence=1,
    ),
    "unknown_fault_parameter": Case(
        'parameters = { mode = "restart" }',
        'parameters = { mode = "restart", delay_ms = 5 }',
        "faults[3]",
        "[[faults]]",
        ("parameters for sandbox_restart", "delay_ms"),
        occurrence=3,
    ),
    "factor_unknown_source": Case(
        'source = "kernel-release"',
        'source = "uname"',
        "factors[1].source",
        'source = "uname"',
        ("unknown source 'uname'",),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_spec(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    assert case.old in TEXT, "the example changed; update this case"
    text = TEXT.replace(case.old, case.new, 1)
    spec = copy_example(tmp_path, text, f"{name}.toml")
    result = bench("plan", spec)
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert "Traceback" not in err and "internal error" not in err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert str(spec) in err
    if case.key is not None:
        assert f"key `{case.key}`" in err, err
    if case.line_needle is not None:
        assert f"line {line_of(text, case.line_needle, case.occurrence)}" in err, err
    for fragment in case.says:
        assert fragment in err, err
    with pytest.raises(InputError) as info:
        load_spec(spec)
    assert info.value.file == str(spec)


def test_markup_in_messages_is_printed_verbatim(tmp_path: Path) -> None:
    # Messages hold brackets ("[/x]", "['a', 'b']"); they must not be read as rich markup.
    text = TEXT.replace(
        '{ id = "toy-sort", bucket = "hard" }', '{ id = "toy-sort", bucket = "[/x]" }'
    )
    result = bench("plan", copy_example(tmp_path, text))
    assert result.exit_code == 2
    assert "[/x]" in result.stderr and "Traceback" not in result.stderr


def test_missing_spec_file(tmp_path: Path) -> None:
    result = bench("plan", tmp_path / "nope.toml")
    assert result.exit_code == 2
    assert "nope.toml" in result.stderr and "cannot read spec" in result.stderr


@pytest.mark.parametrize("command", [("freeze",), ("amend", "--reason", "x")])
def test_other_commands_report_spec_errors(tmp_path: Path, command: tuple[str, ...]) -> None:
    spec = copy_example(tmp_path, TEXT.replace("cap = 3", "cap = 0"))
    result = bench(command[0], spec, *command[1:])
    assert result.exit_code == 2 and "attempts.cap" in result.stderr
    assert not (tmp_path / "example.freeze.jsonl").exists()
