"""Faults on model calls: the tool `model` through the real trigger engine and journal, the real
fault plugins (only pointed at the model proxy), judged against the unchanged witness contracts
in witnesses/*.json.

- lost_response: the front drops the answer after the backend produced it; the SDK sees a
  closed connection; the backend's ledger is the independent record of the answer;
- sigkill_mid_tool_call: a real SDK subject process is SIGKILLed while its model call is held
  at `dispatched`; the reaper collects the exit, the front's record shows the call in flight;
- freeze: the same subject is stopped (SIGSTOP of its process group) while its model call is
  held, then continued: /proc shows it stopped, and the same process finishes its turns.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.journal import EvidenceStore, Journal, read_journal
from runner.evaluator.protocol.faultkinds import (
    FREEZE,
    LOST_RESPONSE,
    NETWORK_PARTITION,
    SIGKILL_MID_TOOL_CALL,
    FreezeParams,
)
from runner.evaluator.protocol.spec import Trigger
from runner.evaluator.protocol.witness import WitnessContract, evaluate_witness, load_contracts
from runner.runtime.attempt.triggers import TriggerEngine
from runner.runtime.faults.base import FaultPlugin
from runner.runtime.faults.freeze_mid_tool_call import FreezeFault
from runner.runtime.faults.lost_response import LostResponseFault
from runner.runtime.faults.sigkill import SigkillFault
from runner.runtime.host.procs import Reaper, Subject, SubjectLauncher
from runner.runtime.interposers.destination import DestinationService
from runner.runtime.interposers.egress import EgressProxy
from runner.runtime.interposers.modelproxy import ModelProxy
from tests.model_proxy.conftest import SCRIPT
from tests.process_registry import ProcessRegistry
from tests.runtime_interposers.conftest import CELL, effect, request

WITNESSES = Path(__file__).resolve().parents[2] / "witnesses"
SUBJECT = Path(__file__).with_name("sdk_subject.py")


@pytest.fixture(scope="module")
def contracts() -> dict[str, WitnessContract]:
    return load_contracts(WITNESSES)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="afb-mp-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def journal(run_dir: Path) -> Iterator[Journal]:
    with EvidenceStore(run_dir).journal("attempt") as j:
        yield j


def lost_plugin(proxy: ModelProxy) -> FaultPlugin:
    # what the attempt wiring builds for a trigger on tool "model"
    return LostResponseFault(proxy.front, proxy.ledger_address, scope_field="model")


def journal_view(journal: Journal) -> tuple[list[str], dict[str, dict[str, Any]]]:
    recs = [e.record for e in read_journal(journal.path)]
    kinds = [f"lifecycle:{r.state}" if r.type == "lifecycle" else r.type for r in recs]
    obs = {r.name: r.observation for r in recs if r.type == "witness_observation"}
    return kinds, obs


def chat_turns(proxy: ModelProxy, turns: int) -> list[str]:
    """An in-process SDK agent: `turns` chat calls, no retries; 'ok <text>' or 'lost'."""
    client = openai.OpenAI(base_url=proxy.base_urls()["OPENAI_BASE_URL"], api_key="d")
    client = client.with_options(max_retries=0, timeout=20)
    msgs: list[Any] = [{"role": "user", "content": "go"}]
    out = []
    for _ in range(turns):
        try:
            m = client.chat.completions.create(model="m-test", messages=msgs)
        except openai.APIConnectionError:
            out.append("lost")
            continue
        text = m.choices[0].message.content or ""
        out.append(f"ok {text}")
        msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": "next"}]
    return out


@pytest.mark.parametrize("variant", ["real", "noop"])
def test_lost_response_on_a_model_call_is_witnessed_under_the_same_contract(
    journal: Journal,
    run_dir: Path,
    contracts: dict[str, WitnessContract],
    variant: str,
) -> None:
    contract = contracts[LOST_RESPONSE]
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    with (
        DestinationService(run_dir / "ledger.jsonl") as dest,
        EgressProxy(dest.address, sink=engine) as egress,
        ModelProxy("scripted", cassette=SCRIPT, sink=engine) as proxy,
    ):
        plugin = lost_plugin(proxy)
        engine.schedule(
            "lost-model-2",
            LOST_RESPONSE,
            Trigger(tool="model", ordinal=2, phase=Phase.EFFECT_DONE),
            plugin if variant == "real" else plugin.noop(),
            {"endpoint": "destination"},
            contract,
        )
        engine.arm()
        # the destination's egress proxy assigns call ids in the same engine: no collision
        status, _ = request(egress.address, "POST", "/effects", effect("repo", 1))
        assert status == 201
        got: list[list[str]] = []
        t = threading.Thread(target=lambda: got.append(chat_turns(proxy, 3)))
        t.start()
        t.join(60)
        assert got, "agent did not finish"
    counts = engine.finish()
    assert counts == {"model": 3, "submit_patch": 1}
    kinds, obs = journal_view(journal)
    verdict = evaluate_witness(contract, obs, {"endpoint": "destination"})
    if variant == "noop":
        assert got[0] == ["ok Let me look.", "ok ", "ok All done."]  # nothing was lost
        assert "lifecycle:rejected" in kinds and "lifecycle:witnessed" not in kinds
        assert not verdict.satisfied and "zero_bytes_delivered" in verdict.violations
        return
    # the 2nd answer was produced (turn 1) and dropped; the agent asked again and got turn 1
    assert got[0] == ["ok Let me look.", "lost", "ok "]
    assert kinds[:9] == [
        "lifecycle:scheduled",
        "lifecycle:armed",
        "trigger_reached",
        "actuator_receipt",
        "lifecycle:injected",
        "witness_observation",
        "witness_observation",
        "witness_observation",
        "lifecycle:witnessed",
    ]
    assert verdict.satisfied, verdict.violations
    pc, dl, ag = (obs[n] for n in ("proxy_connection", "destination_ledger", "agent_side"))
    assert pc["collector"] == "egress_proxy" and pc["connection_id"].startswith("m")
    assert pc["downstream_response_bytes"] == 0 and pc["upstream_response_bytes"] > 0
    assert dl["component"] == "destination" and dl["committed"] is True
    assert dl["scope"] == "m-test" and dl["effect_id"] == "model-000002"
    assert ag["transport_failure"] is True
    ledger = proxy.ledger()
    assert [i["turn"] for i in ledger] == [0, 1, 1]  # the dropped answer, and the re-ask


class _Registry(ProcessRegistry):
    """Launches through a real launcher (no netns here)."""

    def __init__(self, launcher: SubjectLauncher) -> None:
        super().__init__()
        self.launcher = launcher

    def launch(self, argv: list[str], state_dir: Path, env: dict[str, str]) -> Subject:
        return self.add(self.launcher.launch(argv, state_dir=state_dir, env=env))


def test_sigkill_mid_model_call_is_witnessed_under_the_same_contract(
    journal: Journal, run_dir: Path, contracts: dict[str, WitnessContract]
) -> None:
    contract = contracts[SIGKILL_MID_TOOL_CALL]
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    with Reaper() as reaper, ModelProxy("scripted", cassette=SCRIPT, sink=engine) as proxy:
        registry = _Registry(SubjectLauncher("a1b2c3", reaper))
        plugin = SigkillFault(registry, None, proxy.front)  # type: ignore[arg-type]
        engine.schedule(
            "kill-model-2",
            SIGKILL_MID_TOOL_CALL,
            Trigger(tool="model", ordinal=2, phase=Phase.DISPATCHED),
            plugin,
            {"target": "subject"},
            contract,
        )
        engine.arm()
        env = {**proxy.subject_env(), "TURNS": "3"}
        state = run_dir / "subject"
        first = registry.launch([sys.executable, str(SUBJECT)], state, env)
        st = first.wait(60)
        assert st.signaled and st.term_signal == 9
        assert registry.asked.wait(30)  # the engine witnessed, then recovery asked to relaunch
        assert registry.expected and len(registry.relaunch) == 1
        # the relaunched agent starts over and gets the same answers (scripted by turn)
        second = registry.launch([sys.executable, str(SUBJECT)], state, env)
        assert second.wait(60).exit_code == 0
        engine.finish()
    out = (state / "stdout.log").read_text().splitlines()
    assert out == ["ok Let me look.", "ok Let me look.", "ok ", "ok All done."]
    kinds, obs = journal_view(journal)
    assert "lifecycle:witnessed" in kinds and "lifecycle:recovered" in kinds
    verdict = evaluate_witness(contract, obs, {"target": "subject"})
    assert verdict.satisfied, verdict.violations
    call = obs["interposer_call"]
    assert call["collector"] == "egress_proxy" and call["tool"] == "model"
    assert call["in_flight"] is True and call["call_id"].startswith("m")


def test_freeze_mid_model_call_is_witnessed_and_the_same_process_finishes(
    journal: Journal, run_dir: Path, contracts: dict[str, WitnessContract]
) -> None:
    contract = contracts[FREEZE]
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    params = {"target": "subject", "method": "sigstop", "duration_ms": 1000}
    with Reaper() as reaper, ModelProxy("scripted", cassette=SCRIPT, sink=engine) as proxy:
        registry = _Registry(SubjectLauncher("a1b2c3", reaper))
        plugin = FreezeFault(registry, None, proxy.front, FreezeParams(**params))  # type: ignore[arg-type]
        engine.schedule(
            "freeze-model-2",
            FREEZE,
            Trigger(tool="model", ordinal=2, phase=Phase.DISPATCHED),
            plugin,
            params,
            contract,
        )
        engine.arm()
        env = {**proxy.subject_env(), "TURNS": "3"}
        state = run_dir / "subject"
        only = registry.launch([sys.executable, str(SUBJECT)], state, env)
        assert only.wait(60).exit_code == 0  # no relaunch: the stopped process went on
        engine.finish()
    out = (state / "stdout.log").read_text().splitlines()
    assert out == ["ok Let me look.", "ok ", "ok All done."]  # the SDK's 30 s timeout held
    kinds, obs = journal_view(journal)
    assert [k for k in kinds if k.startswith("lifecycle:")][-2:] == [
        "lifecycle:witnessed",
        "lifecycle:released",
    ]
    verdict = evaluate_witness(contract, obs, params, actuator_component="subject_launcher")
    assert verdict.satisfied, verdict.violations
    assert obs["frozen"]["state"] == "T" and obs["resumed"]["held_ms"] >= 1000
    assert obs["resumed"]["start_time"] == only.identity.start_time
    call = obs["interposer_call"]
    assert call["collector"] == "egress_proxy" and call["tool"] == "model"
    assert call["in_flight"] is True and call["call_id"].startswith("m")


@pytest.mark.runtime
def test_network_partition_of_the_model_endpoint_is_witnessed_under_the_same_contract(
    journal: Journal, run_dir: Path, contracts: dict[str, WitnessContract]
) -> None:
    """A real netns + nft table: the subject (an SDK process inside the namespace) loses the
    model endpoint at its 2nd model call; the drop rule, its counter and the prober's probes
    witness it; after release the agent's next call gets through."""
    from runner.runtime.faults.network_partition import NetworkPartitionFault
    from runner.runtime.host import naming
    from runner.runtime.host.netns import AttemptNetwork
    from runner.runtime.host.nft import PartitionTable

    contract = contracts[NETWORK_PARTITION]
    params = {"endpoint": "destination", "control": "interposer"}
    params["release_after_blocked_attempts"] = 1  # type: ignore[assignment]
    engine = TriggerEngine(journal, cell_id=CELL, attempt=1)
    run_id = naming.new_run_id()
    with (
        naming.hold_run(run_id),
        AttemptNetwork(run_id) as net,
        PartitionTable(run_id, net.index, netns=net.netns) as table,  # type: ignore[arg-type]
        Reaper() as reaper,
        socket.create_server((str(net.host_addr), 0)) as control,
        ModelProxy("scripted", cassette=SCRIPT, sink=engine, host=str(net.host_addr)) as proxy,
    ):
        plugin = NetworkPartitionFault(
            table, net.prober(), proxy.address, control.getsockname()[:2]
        )
        trigger = Trigger(tool="model", ordinal=2, phase=Phase.RECEIVED)
        engine.schedule("cut-model-2", NETWORK_PARTITION, trigger, plugin, params, contract)
        engine.arm()
        target = "{}:{}".format(*proxy.address)
        launcher = SubjectLauncher(run_id, reaper)
        state = run_dir / "subject"
        env = {**proxy.subject_env(), "TURNS": "3"}
        subject = launcher.launch(
            [sys.executable, str(SUBJECT)], state_dir=state, netns=net.netns, env=env
        )
        assert subject.wait(120).exit_code == 0
        engine.finish()
    out = (state / "stdout.log").read_text().splitlines()
    assert out == ["ok Let me look.", "lost APIConnectionError", "ok "]
    kinds, obs = journal_view(journal)
    assert "lifecycle:witnessed" in kinds and "lifecycle:released" in kinds
    verdict = evaluate_witness(contract, obs, params)
    assert verdict.satisfied, verdict.violations
    assert obs["rule_state"]["target"] == target
