"""Each subject's role (oracle for `reference:`, agent otherwise) is recorded in protocol.json and
in every scorecard, and a protocol.json whose roles do not match its spec is inconsistent."""

from __future__ import annotations

from pathlib import Path

from runner.evaluator.protocol.runfile import (
    consistency_problems,
    read_protocol,
    subject_roles,
    write_protocol,
)
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.protocol.subjects import subject_role
from runner.evaluator.publish.render import scorecard_md
from runner.evaluator.publish.results import derive
from tests.evidence.synth import Run

ROOT = Path(__file__).resolve().parents[2]


def test_roles_follow_the_adapter() -> None:
    assert subject_role("reference:blind_retry") == "oracle"
    assert subject_role("command:my-agent") == "agent"
    assert subject_role("mini-swe-agent:2.4.6") == "agent"
    assert subject_role("referencex:y") == "agent"  # the adapter, not a prefix of its name
    spec = load_spec(ROOT / "specs" / "swe-lite-agents.toml")
    assert subject_roles(spec) == {
        "mini-swe-agent-careful": "agent",
        "mini-swe-agent-naive": "agent",
        "intent-reconcile-careful": "oracle",
        "intent-reconcile-naive": "oracle",
        "openai-agents-retry0": "agent",
        "openai-agents-retry3": "agent",
    }


def test_protocol_json_records_roles_and_a_lying_role_is_inconsistent(tmp_path: Path) -> None:
    run = Run(tmp_path / "plain")  # a protocol.json as written before roles: still consistent
    assert run.protocol.subject_roles is None
    assert "subject_roles" not in (tmp_path / "plain" / "protocol.json").read_text()
    assert consistency_problems(read_protocol(tmp_path / "plain")) == []
    roles = subject_roles(run.spec)
    assert set(roles.values()) == {"oracle"}  # the synthetic spec's subjects are reference:
    good = run.protocol.model_copy(update={"subject_roles": roles})
    write_protocol(tmp_path / "good", good)
    assert read_protocol(tmp_path / "good").subject_roles == roles
    assert consistency_problems(read_protocol(tmp_path / "good")) == []
    lying = {k: "agent" for k in roles}
    bad = run.protocol.model_copy(update={"subject_roles": lying})
    assert consistency_problems(bad) == ["subject_roles do not match the spec's subjects' adapters"]


def test_every_scorecard_says_its_subjects_role(tmp_path: Path) -> None:
    fixed = "sha256:" + "0" * 64
    run = Run(tmp_path, evaluator=fixed, fixed_clock=True)
    for subject in run.ids.subject_config_hashes:
        run.fill(subject, lambda i, s: "completed")
    _, results, files = derive(tmp_path, fixed)
    cards = [r.scorecard for r in results.values() if r.scorecard is not None]
    assert len(cards) == len(run.ids.subject_config_hashes) >= 2
    for card in cards:
        assert card.subject_role == "oracle"
        assert "role: **oracle**" in scorecard_md(card)
        assert b'"subject_role":"oracle"' in files[f"results/{card.subject_id}/scorecard.json"]
