"""Infrastructure failures end as HarnessError + AttemptEnded(harness_error), with no leftovers."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from runner.evaluator.core.types import Status
from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.evidence.records import AttemptEnded, AttemptStarted, HarnessError
from runner.evaluator.protocol.faultkinds import SANDBOX_RESTART
from runner.runtime.attempt.run import run_attempt
from runner.runtime.attempt.services import RunServices
from runner.runtime.host import netns
from runner.runtime.selftest import evaluate, selftest_plan

pytestmark = pytest.mark.runtime


def _leftovers(run_id: str) -> list[str]:
    r = subprocess.run(
        ["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True, check=True
    )
    ctrs = [(c.get("Names") or [""])[0] for c in json.loads(r.stdout or "[]")]
    names = netns.list_netns() + netns.host_links() + ctrs
    return [n for n in names if run_id in n]


@pytest.mark.parametrize(
    ("change", "stage"),
    [
        ({"image": "localhost/afb-no-such-image:none"}, "sandbox"),
        ({"sandbox_setup": (["/bin/sh", "-c", "exit 3"],)}, "sandbox_setup"),
    ],
    ids=["missing_image", "failing_setup"],
)
def test_setup_failure_is_recorded_and_cleaned_up(
    services: RunServices, image: str, change: dict[str, object], stage: str
) -> None:
    plan = selftest_plan(
        services.run_id, services.run_dir, SANDBOX_RESTART, "real", image,
        label=f"harness-{stage}",
    )  # fmt: skip
    plan = dataclasses.replace(plan, **change)  # type: ignore[arg-type]
    result = run_attempt(plan, services)
    assert result.outcome == "harness_error" and not result.trigger_reached
    records = [e.record for e in read_journal(result.journal)]
    assert isinstance(records[-1], AttemptEnded) and records[-1].outcome == "harness_error"
    assert [r for r in records if isinstance(r, AttemptStarted)]
    assert [r.stage for r in records if isinstance(r, HarnessError)] == [stage]
    v = evaluate(services.run_dir, plan, services.contracts[plan.kind])
    assert v.status is Status.HARNESS_INVALID
    assert _leftovers(services.run_id) == []
