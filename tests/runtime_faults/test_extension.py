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

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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


class MarkerFault(FaultPlugin):
    kind = KIND
    actuator = "sandbox.put_file"
    actuator_component = "container_runtime"  # the archive API of the container runtime
    observations = {
        "marker_before": Observed(COLLECTOR, WitnessStage.BEFORE_INJECTION),
        "marker_after": Observed(COLLECTOR, WitnessStage.AFTER_INJECTION),
    }

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def inject(self, ctx: FaultContext) -> Injection:
        path = str(ctx.parameters.get("path", MarkerParams().path))
        self.sandbox.put_file(path, f"{ctx.fault_id}\n".encode())
        return Injection(applied=True, detail={"path": path})

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        name = "marker_before" if stage is WitnessStage.BEFORE_INJECTION else "marker_after"
        path = str(ctx.parameters.get("path", MarkerParams().path))
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
                kind=KIND,
                build=lambda r: MarkerFault(r.sandbox),
                selftest=registry.SelftestCase(
                    trigger={"tool": "exec", "ordinal": 1, "phase": "dispatched"},
                    parameters={"path": "/tmp/afb-test-marker"},
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


def test_a_plugin_without_an_evaluator_registration_is_refused() -> None:
    entry = registry.FaultKindPlugin(
        kind="afb_test_unregistered",
        build=lambda r: MarkerFault(r.sandbox),
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
