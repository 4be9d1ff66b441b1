"""A new fault kind is one evaluator registration + one witness contract + one runtime plugin.

Registered here, in the test, without editing any module: `bench selftest --kind <it>` must run
it on the real runtime, read WITNESSED with its real actuator and INVALID_INJECTION with the
no-op one (the evaluator judges both from the journal against the contract written below).

The dummy kind's actuator is trivial but real: it writes a marker file into the sandbox through
the container runtime's archive API. Its collector observes the file independently, by running
`cat` inside the sandbox before and after; the no-op writes nothing, so the marker is absent
afterwards and the contract's predicates fail.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from runner.cli.main import app
from runner.evaluator.core.types import StrictFrozen
from runner.evaluator.protocol.faultkinds import register_fault_kind, unregister_fault_kind
from runner.runtime.faults import registry
from runner.runtime.faults.base import (
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    WitnessStage,
)
from runner.runtime.faults.collectors import Collector, register_collector
from runner.runtime.faults.resources import AttemptResources
from runner.runtime.sandbox.base import Sandbox
from tests.runtime_faults.conftest import _missing

KIND = "afb_test_marker"
COLLECTOR = "sandbox_reader"

CONTRACT = {
    "schema": "afb.witness/1",
    "kind": KIND,
    "version": "1",
    "description": "a marker file appeared in the sandbox, read from inside it",
    "observations": [
        {"name": "marker_before", "collector": COLLECTOR, "phase": "before_injection"},
        {"name": "marker_after", "collector": COLLECTOR, "phase": "after_injection"},
    ],
    "predicates": [
        {"id": "marker_absent_before", "op": "eq", "left": "marker_before.present",
         "right": {"const": False}},
        {"id": "marker_present_after", "op": "eq", "left": "marker_after.present",
         "right": {"const": True}},
        {"id": "marker_has_content", "op": "nonempty", "left": "marker_after.content"},
    ],
}  # fmt: skip


class MarkerParams(StrictFrozen):
    path: str = "/tmp/afb-test-marker"


class MarkerFault(FaultPlugin[MarkerParams]):
    kind = KIND
    actuator = "sandbox.put_file"
    actuator_component = "container_runtime"  # the archive API of the container runtime
    observations = {
        "marker_before": Observed(COLLECTOR, WitnessStage.BEFORE_INJECTION),
        "marker_after": Observed(COLLECTOR, WitnessStage.AFTER_INJECTION),
    }

    def __init__(self, sandbox: Sandbox, params: MarkerParams) -> None:
        self.sandbox = sandbox
        self.params = params

    @classmethod
    def build(cls, resources: AttemptResources, params: MarkerParams) -> Self:
        if not isinstance(params, MarkerParams):  # typed all the way: never the spec's dict
            raise TypeError(f"MarkerFault built with {type(params).__name__}")
        return cls(resources.sandbox, params)

    def inject(self, ctx: FaultContext) -> Injection:
        path = self.params.path
        self.sandbox.put_file(path, f"{ctx.fault_id}\n".encode())
        return Injection(applied=True, detail={"path": path})

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        name = "marker_before" if stage is WitnessStage.BEFORE_INJECTION else "marker_after"
        path = self.params.path
        obs: dict[str, Any] = {"path": path}  # the engine stamps the collector identity
        try:
            r = self.sandbox.exec(["cat", path], timeout=30)
            obs |= {"present": r.exit_code == 0, "content": r.stdout.decode(errors="replace")}
        except Exception as exc:  # unreadable is an observation too
            obs |= {"present": None, "content": "", "error": f"{type(exc).__name__}: {exc}"}
        return {name: obs}


@pytest.fixture
def marker_kind(tmp_path: Path) -> Iterator[str]:
    contract = tmp_path / f"{KIND}.json"
    contract.write_text(json.dumps(CONTRACT))
    register_fault_kind(KIND, MarkerParams, contract=contract)
    register_collector(Collector(COLLECTOR, "sandbox_exec", "`cat` run inside the sandbox"))
    try:
        registry.register(
            registry.FaultKindPlugin(
                MarkerFault,
                selftest=registry.SelftestCase(
                    trigger={"tool": "exec", "ordinal": 1, "phase": "dispatched"},
                    parameters={"path": "/tmp/afb-test-marker-selftest"},
                ),
            )
        )
        yield KIND
    finally:
        registry.unregister(KIND)
        unregister_fault_kind(KIND)


@pytest.mark.runtime
def test_a_registered_kind_runs_in_bench_selftest(marker_kind: str) -> None:
    if reason := _missing():
        pytest.skip(reason)
    result = CliRunner().invoke(app, ["selftest", "--kind", marker_kind, "--json"])
    body = json.loads(result.stdout)
    rows = {r["actuator"]: r for r in body["rows"]}
    assert result.exit_code == 0 and body["ok"], result.stdout + result.stderr
    assert set(rows) == {"real", "noop"}
    assert rows["real"]["verdict"] == "WITNESSED" and rows["real"]["kind"] == marker_kind
    assert rows["noop"]["verdict"] == "INVALID_INJECTION"
    assert {"marker_present_after", "marker_has_content"} <= set(rows["noop"]["violated"])


class UnregisteredFault(MarkerFault):
    kind = "afb_test_unregistered"


def test_a_plugin_without_an_evaluator_registration_is_refused() -> None:
    entry = registry.FaultKindPlugin(
        UnregisteredFault,
        selftest=registry.SelftestCase(trigger={"tool": "exec", "ordinal": 1}),
    )
    with pytest.raises(ValueError, match="no evaluator registration"):
        registry.register(entry)
    assert "afb_test_unregistered" not in registry.registered()
    with pytest.raises(ValueError, match="no fault plugin registered"):
        registry.plugin_for("afb_test_unregistered")


def test_the_cli_refuses_an_unregistered_kind() -> None:
    result = CliRunner().invoke(app, ["selftest", "--kind", "afb_test_unregistered"])
    assert result.exit_code == 2, result.output


def test_a_plugin_that_does_not_build_itself_is_refused(marker_kind: str) -> None:
    class NoBuild(FaultPlugin[MarkerParams]):  # the interface, but no `build`
        kind = KIND
        actuator = MarkerFault.actuator
        actuator_component = MarkerFault.actuator_component
        observations = MarkerFault.observations

        def inject(self, ctx: FaultContext) -> Injection:
            return Injection(applied=True)

        def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
            return {}

    registry.unregister(KIND)
    with pytest.raises(ValueError, match=r"does not override FaultPlugin\.build"):
        registry.register(registry.FaultKindPlugin(NoBuild, registry.SelftestCase({})))


class _Resources:
    """A stand-in for an attempt's resources: only what MarkerFault reads."""

    sandbox = object()


def test_the_plugin_gets_its_parameter_model_not_a_dict(marker_kind: str) -> None:
    res: Any = _Resources()
    plugin = registry.build(KIND, res, {"path": "/tmp/elsewhere"})
    assert isinstance(plugin, MarkerFault) and plugin.sandbox is res.sandbox
    assert plugin.params == MarkerParams(path="/tmp/elsewhere")
    assert registry.build(KIND, res, {}).params == MarkerParams()  # defaulted by the model
    with pytest.raises(ValidationError):  # the kind's model refuses what it does not declare
        registry.build(KIND, res, {"path": "/tmp/x", "extra": 1})
    # a test's replacement factory gets the same typed parameters
    got: list[object] = []
    registry.build(KIND, res, {"path": "/p"}, lambda r, p: got.append(p) or MarkerFault(r, p))
    assert got == [MarkerParams(path="/p")]


def test_every_built_in_kind_builds_itself() -> None:
    for kind in registry.registered():
        cls = registry.plugin_for(kind).plugin
        assert cls.kind == kind and "build" in vars(cls), kind


# --- "a new fault kind edits no existing module": no runtime module outside a kind's own names it

ROOT = Path(__file__).resolve().parents[2]


def kind_mentions(root: Path = ROOT) -> list[str]:
    """Where a runtime module other than a kind's own names a built-in kind in code: imports its
    module, its name constant or parameter model, or spells its name (comments and docstrings
    may)."""
    from runner.evaluator.protocol import faultkinds

    kinds = set(registry.registered()) - {KIND}
    constants = {n for n, v in vars(faultkinds).items() if isinstance(v, str) and v in kinds}
    models = {faultkinds.kind_def(k).params.__name__ for k in kinds}
    faults_dir = root / "runner" / "runtime" / "faults"
    own = {faults_dir / f"{k}.py" for k in kinds} | {
        p for p in faults_dir.glob("*.py") if p.stem not in {*registry._NOT_KINDS, "__init__"}
    }
    out = []
    for f in sorted((root / "runner" / "runtime").rglob("*.py")):
        if f in own:
            continue
        tree = ast.parse(f.read_text(), filename=str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            what = ""
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                names = {a.name for a in node.names}
                if any(mod == f"runner.runtime.faults.{k}" for k in kinds) or (
                    mod == "runner.runtime.faults" and names & kinds
                ):
                    what = f"imports {mod}"
                elif mod == faultkinds.__name__ and names & (constants | models):
                    what = f"imports {sorted(names & (constants | models))}"
            elif isinstance(node, ast.Import):
                hit = [a.name for a in node.names if a.name.rpartition(".")[2] in kinds]
                what = f"imports {hit}" if hit else ""
            elif isinstance(node, ast.Attribute) and node.attr in constants | models:
                what = f"uses {node.attr}"
            elif isinstance(node, ast.Constant) and node.value in kinds:
                what = f"spells {node.value!r}"
            if what:
                out.append(f"{f.relative_to(root)}:{getattr(node, 'lineno', 0)} {what}")
    return out


def test_no_runtime_module_names_a_fault_kind_but_its_own() -> None:
    assert len(registry.registered()) >= 4
    assert kind_mentions() == []


@pytest.mark.parametrize(
    "line",
    [
        "from runner.runtime.faults.lost_response import LostResponseFault\n",
        "from runner.evaluator.protocol.faultkinds import NETWORK_PARTITION\n",
        "import runner.evaluator.protocol.faultkinds as fk\nX = fk.RestartParams\n",
        'def f(kind: str) -> bool:\n    return kind == "sigkill_mid_tool_call"\n',
    ],
)
def test_a_planted_kind_name_is_caught(tmp_path: Path, line: str) -> None:
    import shutil

    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "runner" / "runtime" / "attempt" / "planted.py").write_text(line)
    found = kind_mentions(tmp_path)
    assert len(found) == 1 and found[0].startswith("runner/runtime/attempt/planted.py"), found
