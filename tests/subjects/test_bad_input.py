"""Every bad subject input is an input error (exit 2) before any cell runs, naming the file and
the entry: unknown adapter, bad config, an environment digest that does not match or an
environment that does not build, a missing / malformed / unknown-version / wrong-kind cassette,
live mode without its key."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.spec import Subject
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.subjects.command import CommandAdapter
from runner.runtime.subjects.config import UvEnvironment
from runner.runtime.subjects.registry import ResolveContext, resolve_subjects
from runner.runtime.subjects.tree import tree_digest
from tests.subjects.agents import bench, make_spec, subject_block

MSA = subject_block("mini-swe-agent")


def _run(spec: Path, tmp: Path) -> tuple[int, str]:
    out = tmp / "out"
    proc = bench("run", str(spec), "--draft", "--out", str(out), timeout=600)
    assert not out.exists() or not any(out.iterdir()), "nothing may be written"
    return proc.returncode, proc.stdout + proc.stderr


def test_unknown_adapter(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, MSA.replace('agent = "mini-swe-agent:2.4.6"', 'agent = "nope:1"'))
    rc, text = _run(spec, tmp_path)
    assert rc == 2 and "no subject adapter for agent 'nope:1'" in text, text
    assert "mini-swe-agent:" in text and "command:" in text and str(spec) in text


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, MSA.replace("step_limit = 7", 'step_limit = "seven"'))
    rc, text = _run(spec, tmp_path)
    assert rc == 2 and "subjects[0].config.step_limit" in text, text


def test_plan_checks_each_adapters_config_grammar(tmp_path: Path) -> None:
    """The evaluator plans a config as declared (it hashes it as written); the runtime checks
    its grammar at plan time (nothing built) and says what `bench run` will refuse."""
    spec = make_spec(tmp_path, MSA.replace("step_limit = 7", 'step_limit = "seven"'))
    proc = bench("plan", str(spec), timeout=120)
    assert proc.returncode == 0 and "warning" in proc.stderr, proc.stderr
    assert "subjects[0].config.step_limit" in proc.stderr and "bench run" in proc.stderr
    spec = make_spec(
        tmp_path / "b", MSA.replace('agent = "mini-swe-agent:2.4.6"', 'agent = "nope:1"')
    )
    proc = bench("plan", str(spec), timeout=120)
    assert proc.returncode == 0 and "no subject adapter for agent 'nope:1'" in proc.stderr
    good = make_spec(tmp_path / "c", MSA)
    proc = bench("plan", str(good), timeout=120)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


def test_environment_digest_mismatch(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        re.sub(
            r'(project = "subjects/mini-swe-agent"\ndigest = ")sha256:[0-9a-f]{4}',
            r"\1sha256:0000",
            MSA,
        ),
    )
    rc, text = _run(spec, tmp_path)
    assert rc == 2 and "subjects/mini-swe-agent" in text and "hashes to" in text, text


def _cassette_spec(tmp_path: Path, edit: dict[str, str | None]) -> Path:
    spec = make_spec(tmp_path, MSA)
    folder = spec.parent / "swe-lite-agents" / "cassettes"
    for name, text in edit.items():
        if text is None:
            (folder / name).unlink()
        else:
            (folder / name).write_text(text)
    body = spec.read_text()
    body = re.sub(r'(cassettes = "swe-lite-agents/cassettes"\ndigest = ")sha256:[0-9a-f]{64}',
                  lambda m: m.group(1) + tree_digest(folder), body)  # fmt: skip
    spec.write_text(body)
    return spec


@pytest.mark.runtime  # builds or locks the subject environment in /var/lib/afb: root
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "no cassette for task 'cachetools-cached-info'"),
        ("{not json", "not a JSON cassette"),
        ('{"version": 2, "kind": "scripted", "turns": []}', "unknown cassette version 2"),
        ('{"version": 1, "kind": "scripted", "turns": []}', "needs at least one turn"),
        ('{"version": 1, "kind": "scripted", "turns": [{}]}', "key `turns[0]`"),
        ('{"version": 1, "kind": "recorded"}', "serves a scripted cassette"),
    ],
)
def test_bad_cassette_names_the_file(tmp_path: Path, text: str | None, expected: str) -> None:
    name = "cachetools-cached-info.json"
    spec = _cassette_spec(tmp_path, {name: text})
    rc, out = _run(spec, tmp_path)
    assert rc == 2 and expected in out, out
    assert name in out


@pytest.mark.runtime  # builds or locks the subject environment in /var/lib/afb: root
def test_cassette_digest_mismatch(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, MSA)
    (spec.parent / "swe-lite-agents" / "cassettes" / "extra.json").write_text("{}")
    rc, out = _run(spec, tmp_path)
    assert rc == 2 and "model.digest" in out and "hashes to" in out, out


@pytest.mark.runtime  # builds or locks the subject environment in /var/lib/afb: root
def test_live_mode_without_its_key(tmp_path: Path) -> None:
    block = MSA.split("[subjects.config.model]")[0] + (
        '[subjects.config.model]\nmode = "live"\nupstream = "http://127.0.0.1:9/v1"\n'
        'key_env = "AFB_TEST_ABSENT_KEY"\n'
    )
    os.environ.pop("AFB_TEST_ABSENT_KEY", None)
    spec = make_spec(tmp_path, block)
    rc, out = _run(spec, tmp_path)
    assert rc == 2 and "AFB_TEST_ABSENT_KEY" in out, out


@pytest.mark.runtime  # builds or locks the subject environment in /var/lib/afb: root
@pytest.mark.uv  # the build is `uv sync --frozen`
def test_an_environment_that_does_not_build(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    project = root / "subjects" / "broken"
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "broken"\nversion = "0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["afb-no-such-package-x==1"]\n'
    )
    (project / "uv.lock").write_text("version = 1\nthis is not a lock\n")
    env = UvEnvironment(project="subjects/broken", digest=tree_digest(project))
    subject = Subject(id="b", agent="command:b", config={
        "argv": ["{env}/venv/bin/python"], "environment": env.model_dump()})  # fmt: skip
    spec = load_spec(make_spec(tmp_path, MSA))
    ctx = ResolveContext(spec, tmp_path / "spec" / "agents-test.toml", root)
    with pytest.raises(InputError, match=r"subjects/broken.*failed to build"):
        CommandAdapter().resolve(subject, ctx)


def test_reserved_variables_cannot_be_overridden(tmp_path: Path) -> None:
    spec = load_spec(make_spec(tmp_path, MSA))
    subject = Subject(id="c", agent="command:c", config={
        "argv": ["/bin/true"], "env": {"OPENAI_BASE_URL": "http://elsewhere"}})  # fmt: skip
    spec = spec.model_copy(update={"subjects": [subject]})
    with pytest.raises(InputError) as err:
        resolve_subjects(spec, tmp_path / "spec.toml")
    assert "OPENAI_BASE_URL" in str(err.value) and "subjects[0].config" in str(err.value)


# ------------------------------------------------------------------ tree digest invariants

names = st.lists(st.from_regex(r"[a-z]{1,8}(\.py|\.json)?", fullmatch=True), min_size=1,
                 max_size=5, unique=True)  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(files=st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.binary(max_size=64),
                             min_size=1, max_size=5), order=st.randoms())  # fmt: skip
def test_tree_digest_is_content_only(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes], order
) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    items = list(files.items())
    for name, data in items:
        (a / name).write_bytes(data)
    order.shuffle(items)
    for name, data in items:
        (b / name).write_bytes(data)
    (b / "__pycache__").mkdir()
    (b / "__pycache__" / "x.pyc").write_bytes(b"cache")  # never an input
    assert tree_digest(a) == tree_digest(b)
    name, data = items[0]
    (b / name).write_bytes(data + b"!")  # one byte more: another digest
    assert tree_digest(a) != tree_digest(b)


def test_command_config_schema_is_the_one_beside_it() -> None:
    from runner.runtime.subjects.command import CommandConfig

    root = Path(__file__).resolve().parents[2]
    folder = root / "runner" / "runtime" / "subjects" / "schemas"
    on_disk = json.loads((folder / "subject-command-config.schema.json").read_text())
    assert on_disk == CommandConfig.model_json_schema(mode="validation", by_alias=True)


def test_triggers_may_select_model_calls_and_nothing_undeclared(tmp_path: Path) -> None:
    fault = '[[faults]]\nid = "f"\nkind = "lost_response"\ntrigger = {{ tool = "{}", ordinal = 1, phase = "effect_done" }}\n'  # noqa: E501
    spec = load_spec(make_spec(tmp_path / "a", MSA, fault.format("model")))
    assert spec.faults[0].trigger.tool == "model"
    with pytest.raises(InputError) as err:
        load_spec(make_spec(tmp_path / "b", MSA, fault.format("modle")))
    assert "unknown tool 'modle'" in str(err.value) and "faults" in str(err.value)
