"""An agent subject finds no part of the known answer anywhere it can look (issue 23, item 1).

The known answer: the gold patch, the tests patch, the hidden tests' ids (`leaks.py` turns them
into markers, minus what the pristine sources hold by design). Looked for in:

- every task's agent view (the task file's content) and mini-swe-agent's launch (argv with its
  prompt, environment, task file), from the real adapters;
- a real draft attempt of two `command:` spies (`spy.py`; one with MCP): their argv, environment,
  task file, state directory, the HTTP and MCP tool listings, the sandbox's folders at run time;
- the sandbox image's whole filesystem.

Each check is shown to fail on a planted leak (the answer put into the agent view; the gold patch
copied into an image). The oracle (`reference:`) still gets the answer, on its own channel.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.benchmarks.registry import workload_for
from runner.benchmarks.swe_lite import agentview
from runner.benchmarks.swe_lite.grade import Task, load_task, load_tasks
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.specload import load_spec
from runner.imagebuild import builder as images
from runner.imagebuild.sources import extract_source, fetch_sources
from runner.runtime.host.paths import SUBJECT_ROOT
from runner.runtime.subjects.registry import resolve_subjects
from runner.runtime.workload import TaskViews
from tests.agentview.leaks import (
    Markers,
    leaks_in_bytes,
    leaks_in_image,
    leaks_in_json,
    markers_for,
    pristine_lines_and_tokens,
)
from tests.subjects.agents import TASK, make_spec, run_draft

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "specs" / "swe-lite"
AGENTS = ROOT / "specs" / "swe-lite-agents.toml"
SPY = Path(__file__).resolve().parent / "spy.py"


@pytest.fixture(scope="module")
def pristine() -> tuple[set[str], set[str]]:
    with tempfile.TemporaryDirectory(prefix="afb-pristine-") as tmp:
        for path in fetch_sources(TASKS / "sources.toml").values():
            extract_source(path, Path(tmp))
        return pristine_lines_and_tokens(Path(tmp))


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_tasks(TASKS)


@pytest.fixture(scope="module")
def markers(tasks: list[Task], pristine: tuple[set[str], set[str]]) -> dict[str, Markers]:
    out = {t.id: markers_for(t, pristine) for t in tasks}
    # not vacuous: every task has distinctive lines, and all but one hidden test names
    assert all(len(m.lines) >= 5 for m in out.values()), {k: len(m.lines) for k, m in out.items()}
    assert sum(len(m.hidden_names) for m in out.values()) >= 10
    return out


# --- the agent view, from the workload ----------------------------------------------------------


def test_every_agent_view_is_fair_and_clean(tasks: list[Task], markers: dict[str, Markers]) -> None:
    spec = load_spec(AGENTS)
    workload = workload_for(spec, AGENTS)
    for t in tasks:
        view = agentview.agent_task(t, spec.tools)
        assert set(view) == agentview.AGENT_KEYS
        assert view["problem_statement"] == t.problem  # the issue text, as in SWE-bench
        assert view["status_tool"] == "submission_status"
        assert view["submit"]["tool"] == "submit_patch" and view["submit"]["irreversible"]
        assert leaks_in_json("agent view", view, markers[t.id]) == []
        prompt = agentview.agent_prompt(view, "afb-submission-status")
        assert "afb-submission-status" in prompt and t.problem.strip() in prompt
        assert leaks_in_json("prompt", prompt, markers[t.id]) == []
    tid = sorted(spec.task_index())[0]
    assert workload.agent_task(tid) == agentview.agent_task(load_task(TASKS / tid), spec.tools)
    # the oracle view still carries the answer: only its channel differs
    oracle = workload.oracle_task(tid)
    assert oracle["gold_patch"] == (TASKS / tid / "gold.patch").read_text()
    assert leaks_in_json("oracle view", oracle, markers[tid]) != []


def test_a_planted_leak_in_the_agent_view_is_caught(
    tasks: list[Task], markers: dict[str, Markers]
) -> None:
    t = tasks[0]
    view = agentview.agent_task(t)
    for key, value in (
        ("gold_patch", t.gold_patch.decode()),
        ("tests_patch", t.tests_patch.decode()),
        ("hint", f"run {t.fail_to_pass[0]}"),
        ("hint", t.fail_to_pass[-1].rsplit("::", 1)[-1]),
    ):
        found = leaks_in_json("planted", {**view, key: value}, markers[t.id])
        assert found, key
    # one line of the gold patch inside the problem statement's text is enough
    line = sorted(markers[t.id].lines)[0]
    planted = {**view, "problem_statement": view["problem_statement"] + "\n" + line}
    assert leaks_in_json("planted", planted, markers[t.id]) != []


def test_mini_swe_agent_is_launched_with_the_agent_view_only(markers: dict[str, Markers]) -> None:
    spec = load_spec(AGENTS)
    workload = workload_for(spec, AGENTS)
    launch = resolve_subjects(spec, AGENTS, workload)["mini-swe-agent-careful"]
    for tid in sorted(spec.task_index()):
        cmd = launch(TaskViews(tid, workload))
        prompt = cmd.argv[cmd.argv.index("-t") + 1]
        assert workload.agent_task(tid)["problem_statement"].strip() in prompt
        assert "afb-submission-status" in prompt
        assert cmd.task == workload.agent_task(tid)
        seen = {"argv": list(cmd.argv), "env": dict(cmd.env), "task": cmd.task}
        assert leaks_in_json(f"mini-swe-agent {tid}", seen, markers[tid]) == []


def test_the_oracle_gets_the_answer_in_its_file_never_in_argv(markers: dict[str, Markers]) -> None:
    """A process's command line is readable by every local user (/proc/<pid>/cmdline): an agent
    running beside an oracle could read an answer there. The oracle view goes to its own file
    (AFB_ORACLE_FILE, in its private state directory); argv and the task file stay clean."""
    spec = load_spec(AGENTS)
    workload = workload_for(spec, AGENTS)
    launches = resolve_subjects(spec, AGENTS, workload)
    for tid in sorted(spec.task_index()):
        oracle = launches["intent-reconcile-careful"](TaskViews(tid, workload))
        assert oracle.oracle == workload.oracle_task(tid)
        assert leaks_in_json("oracle view", oracle.oracle, markers[tid]) != []
        seen = {"argv": list(oracle.argv), "env": dict(oracle.env), "task": oracle.task}
        assert leaks_in_json(f"oracle {tid}", seen, markers[tid]) == []
        agent = launches["mini-swe-agent-careful"](TaskViews(tid, workload))
        assert agent.oracle is None


def test_a_non_oracle_subject_asking_for_the_oracle_view_is_an_input_error() -> None:
    spec = load_spec(AGENTS)
    workload = workload_for(spec, AGENTS)
    mini = next(i for i, s in enumerate(spec.subjects) if s.id == "mini-swe-agent-careful")
    for extra in ({"oracle": True}, {"env": {"AFB_ORACLE": "1"}}):
        s = spec.subjects[mini]
        bad = s.model_copy(update={"config": {**s.config, **extra}})
        subjects = [bad if i == mini else x for i, x in enumerate(spec.subjects)]
        with pytest.raises(InputError) as exc:
            resolve_subjects(spec.model_copy(update={"subjects": subjects}), AGENTS, workload)
        assert exc.value.file == str(AGENTS)
        assert exc.value.key == f"subjects[{mini}].config.{next(iter(extra))}"
        assert "oracle" in exc.value.render()
    command = """
[[subjects]]
id = "sneaky"
agent = "command:sneaky"

[subjects.config]
argv = ["/usr/bin/python3", "agent.py", "--oracle-json"]
"""
    with tempfile.TemporaryDirectory() as tmp:
        path = make_spec(Path(tmp), command)
        with pytest.raises(InputError) as exc:
            resolve_subjects(load_spec(path), path, workload_for(load_spec(path), path))
        assert exc.value.key == "subjects[0].config.argv" and exc.value.file == str(path)
        # through `bench run`: exit 2, naming the file and the key, before any run directory
        proc, _ = run_draft(path, Path(tmp) / "out")
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        said = proc.stdout + proc.stderr
        assert str(path) in said and "subjects[0].config.argv" in said and "oracle" in said
        assert not (Path(tmp) / "out").exists() or not any((Path(tmp) / "out").iterdir())


# --- a real attempt: what a subject can reach --------------------------------------------------


def _spy_blocks(script: Path, planted: str) -> str:
    """Two spies (HTTP only; with MCP), and a third whose spec plants one line of the answer in
    its environment: the same check must find that one."""
    out = ""
    for sid, mcp, env in (
        ("spy", False, {}),
        ("spy-mcp", True, {}),
        ("spy-planted", False, {"SPY_PLANTED": planted}),
    ):
        out += f"""
[[subjects]]
id = "{sid}"
agent = "command:{sid}"

[subjects.config]
argv = ["/usr/bin/python3", "{script}"]
mcp = {"true" if mcp else "false"}
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}

[subjects.config.limits]
max_relaunches = 0
timeout_s = 600.0
"""
    return out


@pytest.fixture
def public_spy() -> Iterator[Path]:
    """spy.py where the subject uid can read it."""
    folder = Path("/var/tmp") / f"afb-spy-{uuid.uuid4().hex[:10]}"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    target = folder / "spy.py"
    shutil.copy(SPY, target)
    os.chmod(target, 0o644)
    yield target
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.runtime
def test_command_subjects_find_no_part_of_the_answer_anywhere(
    tmp_path: Path, public_spy: Path, markers: dict[str, Markers]
) -> None:
    m = markers[TASK]
    spec = make_spec(tmp_path, _spy_blocks(public_spy, sorted(m.lines)[0]))
    proc, run_dir = run_draft(spec, tmp_path / "out", "--keep-subject-dirs")
    kept = SUBJECT_ROOT / run_dir.name.rsplit("-", 1)[1]
    try:
        assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
        dumps = [json.loads(p.read_text()) for p in sorted(kept.rglob("spy.json"))]
        errs = {p.name: p.read_text()[-1500:] for p in kept.rglob("*std*") if p.is_file()}
        assert len(dumps) == 3, (proc.stdout[-2000:], errs)
        (planted,) = [d for d in dumps if "SPY_PLANTED" in d["env"]]
        assert leaks_in_json("env", planted["env"], m) != []  # the check sees a planted leak
        planted["env"].pop("SPY_PLANTED")
        for d in dumps:
            _check_dump(d, m)
        (with_mcp,) = [d for d in dumps if d["mcp_tools"] is not None]
        names = [t["name"] for t in with_mcp["mcp_tools"]["result"]["tools"]]
        assert "submission_status" in names and "submit_patch" in names
        # the evidence the harness keeps of the attempts holds no answer either (journals are
        # root's, yet a copy of the task in them would be one step from a subject)
        for j in sorted((run_dir / "journals").glob("*-a*.jsonl")):
            assert leaks_in_bytes(j.name, j.read_bytes(), [m]) == []
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def _check_dump(d: dict[str, Any], m: Markers) -> None:
    task = d["task"]
    assert set(task) == agentview.AGENT_KEYS and task["task_id"] == TASK
    assert "task.json" in d["state_files"]
    assert "AFB_ORACLE_FILE" not in d["env"] and "oracle.json" not in d["state_files"]
    assert [t["name"] for t in d["http_tools"]["tools"]][-1] == "submission_status"
    for key in ("argv", "env", "task", "state_files", "http_tools", "mcp_tools"):
        assert leaks_in_json(key, d[key], m) == [], key
    assert d["sandbox_ok"] is True
    tgz = base64.b64decode(d["sandbox_tgz_b64"])
    found, files, sources = [], 0, 0
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        for member in tar:
            fh = tar.extractfile(member) if member.isfile() else None
            if fh is None:
                continue
            files += 1
            sources += member.name.startswith("opt/swe-lite/src/")
            found += leaks_in_bytes(member.name, fh.read(), [m])
    assert files > 100 and sources > 50, (files, sources)  # it saw the sandbox, sources and all
    assert found == []


# --- the sandbox image -------------------------------------------------------------------------


@pytest.mark.runtime
def test_the_sandbox_image_holds_no_answer_and_a_planted_one_is_found(
    markers: dict[str, Markers],
) -> None:
    tag = images.image_tag(ROOT / "images" / "swe-lite")
    if images.image_id(tag) is None:
        pytest.fail(f"the swe-lite image {tag} is not built (bench images build images/swe-lite)")
    found, files = leaks_in_image(tag, markers.values())
    assert files > 1000 and found == []
    # planted: the gold patch of one task, and a hidden test's name in a file name
    m = markers[TASK]
    cid = subprocess.run(["podman", "create", tag], check=True, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    planted = f"localhost/afb-leak-test:{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            notes = Path(tmp) / "notes.txt"
            shutil.copy(TASKS / TASK / "gold.patch", notes)
            subprocess.run(["podman", "cp", str(notes), f"{cid}:/var/cache/notes.txt"], check=True)
            name = Path(tmp) / f"{sorted(m.hidden_names)[0]}.txt"
            name.write_text("nothing here\n")
            subprocess.run(["podman", "cp", str(name), f"{cid}:/tmp/"], check=True)
        subprocess.run(["podman", "commit", "-q", cid, planted], check=True, capture_output=True)
        leaked, _ = leaks_in_image(planted, [m])
        assert any(x.startswith("var/cache/notes.txt:") for x in leaked), leaked
        assert any("(name)" in x and x.startswith("tmp/") for x in leaked), leaked
    finally:
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True)
        subprocess.run(["podman", "rmi", "-f", planted], capture_output=True)


@pytest.mark.runtime
def test_mini_swe_agent_puts_no_part_of_the_answer_before_its_model(
    tmp_path: Path, markers: dict[str, Markers]
) -> None:
    """A real mini-swe-agent attempt (baseline, scripted model): what it put before its model
    (the system and task messages of its own trajectory), its task file and its state directory
    at the first model call hold the problem statement and no part of the answer."""
    from tests.subjects.agents import subject_block, terminal_records

    spec = make_spec(tmp_path, subject_block("mini-swe-agent"))
    proc, run_dir = run_draft(spec, tmp_path / "out", "--keep-subject-dirs")
    kept = SUBJECT_ROOT / run_dir.name.rsplit("-", 1)[1]
    try:
        assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
        ((cell,),) = terminal_records(run_dir).values()
        assert cell.status.value == "COMPLETED"  # the agent view is enough to do the task
        (traj,) = kept.rglob("trajectory.json")
        messages = json.loads(traj.read_text())["messages"]
        first = next(i for i, msg in enumerate(messages) if msg.get("role") == "assistant")
        before = messages[:first]
        text = json.dumps(before, ensure_ascii=False)
        m = markers[TASK]
        assert (TASKS / TASK / "problem.md").read_text().strip().splitlines()[0] in text
        assert "afb-submission-status" in text
        assert leaks_in_json("mini-swe-agent's first prompt", before, m) == []
        (task,) = kept.rglob("task.json")
        assert leaks_in_json("task.json", json.loads(task.read_text()), m) == []
    finally:
        shutil.rmtree(kept, ignore_errors=True)
