"""A run's attempts judge their witnesses by the run's own contracts (protocol.json), not by
what `witnesses/` holds when they run: a real RunServices, given the run's contracts, keeps them
although its witnesses folder was edited after the run was created. Without them it reads the
folder (the self-test's way), which is what makes the first half a test.

The wiring (`run_matrix` hands protocol.json's contracts over): tests/runtime_prepared/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from runner.benchmarks.registry import workload_for
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.protocol.witness import load_contracts
from runner.runtime.attempt.services import RunServices
from runner.runtime.executor import MatrixRun
from runner.runtime.host import naming
from runner.runtime.prepared import SpecSource, prepare

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"


def test_attempts_keep_the_runs_contracts_after_witnesses_change(tmp_path: Path) -> None:
    prepared = prepare(SpecSource.read(SMOKE))
    mrun = MatrixRun.create(
        prepared, tmp_path / "runs", naming.new_run_id(), True, workload_for(prepared.spec, SMOKE)
    )
    witnesses = tmp_path / "witnesses"  # the checkout's witnesses/, then edited
    shutil.copytree(project_root() / "witnesses", witnesses)
    edited = witnesses / "lost_response.json"
    body = json.loads(edited.read_text())
    body["description"] = "edited after the run was created"
    edited.write_text(json.dumps(body))
    now = load_contracts(witnesses)
    ours = read_protocol(mrun.run_dir).contract_map()
    assert now["lost_response"] != ours["lost_response"]

    with RunServices(
        naming.new_run_id(), tmp_path / "a", witnesses_dir=witnesses, contracts=ours
    ) as s:
        assert s.contracts == ours
    with RunServices(naming.new_run_id(), tmp_path / "b", witnesses_dir=witnesses) as s:
        assert s.contracts == now  # no contracts given: the folder as it is now
