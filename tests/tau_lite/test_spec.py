"""A tau-lite spec parses under the spec language as it is (tools, task ids, grader), and
`TauLiteWorkload.from_spec` takes it, or names what is wrong. Derived in the test from
specs/swe-lite-smoke.toml (a draft: no tau-lite spec is in specs/ until the workload runs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner.benchmarks.tau_lite import domains, wheel
from runner.benchmarks.tau_lite.workload import TauLiteWorkload
from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.specload import load_spec

SMOKE = Path(__file__).resolve().parents[2] / "specs" / "swe-lite-smoke.toml"


def draft(tmp_path: Path, task_ids: list[str], writes: list[str] | None = None) -> Path:
    text = SMOKE.read_text()
    head, rest = text.split("[[tools]]", 1)
    head = head.replace('id = "swe-lite-smoke"', 'id = "tau-lite-draft"')
    subjects = rest[rest.index("[[subjects]]") : rest.index("[[faults]]")]
    tail = rest[rest.index("[matrix]") :]
    tail = re.sub(
        r"\[grader\].*?(?=\n# Controlled factors)",
        '[grader]\nid = "tau-lite"\nversion = "0"\nimage = "swe-lite"\n',
        tail,
        flags=re.S,
    )
    tools = []
    for d in wheel.DOMAINS:
        for name, t in sorted(domains.TOOLS[d].items()):
            irreversible = t.kind == "write" if writes is None else name in writes
            if f'name = "{name}"' not in "".join(tools):
                tools.append(
                    f'[[tools]]\nname = "{name}"\nirreversible = {str(irreversible).lower()}\n'
                )
    tasks = ", ".join(f'{{ id = "{t}", bucket = "{t.split("-")[0]}" }}' for t in task_ids)
    task_set = (
        f'[[task_sets]]\nid = "tau-lite"\nbuckets = ["airline", "retail"]\ntasks = [{tasks}]\n'
    )
    path = tmp_path / "tau-lite-draft.toml"
    path.write_text(head + "\n".join(tools) + "\n" + task_set + "\n" + subjects + tail)
    return path


@pytest.fixture(autouse=True)
def _built_once(sets, monkeypatch: pytest.MonkeyPatch) -> None:
    """from_spec builds both domains from the wheel; the session has built them already."""
    from runner.benchmarks.tau_lite import tasks

    monkeypatch.setattr(tasks, "build", lambda path, workdir=None: sets)


def test_a_tau_lite_spec_parses_and_builds_its_workload(tmp_path: Path, wheel_path: Path) -> None:
    spec = load_spec(draft(tmp_path, ["airline-8", "retail-0"]))
    assert spec.grader.id == "tau-lite" and sorted(spec.task_index()) == ["airline-8", "retail-0"]
    w = TauLiteWorkload.from_spec(spec, tmp_path)
    assert w.image == "swe-lite"
    assert w.agent_task("retail-0")["domain"] == "retail"


def test_a_spec_with_an_excluded_task_or_wrong_tools_is_named(
    tmp_path: Path, wheel_path: Path
) -> None:
    spec = load_spec(draft(tmp_path, ["retail-12"]))
    with pytest.raises(InputError, match=r"retail-12 \(expected write 12_4"):
        TauLiteWorkload.from_spec(spec, tmp_path)
    spec = load_spec(
        draft(tmp_path, ["airline-8"], writes=["book_reservation", "get_user_details"])
    )
    with pytest.raises(
        InputError,
        match=r"missing .*'cancel_reservation'.* not write tools \['get_user_details'\]",
    ):
        TauLiteWorkload.from_spec(spec, tmp_path)
