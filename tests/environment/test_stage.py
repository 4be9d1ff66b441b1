"""Conformance cannot be skipped: the evaluator runs the environment stage itself.

A run whose environment artifact violates a required factor (a kernel outside the spec's class)
is ineligible through every public entry point that evaluates a run; results written by an
evaluator that skipped the check are refused by every entry point that checks results; and two
runs that each conform but not with each other are not compared. No entry point takes a hook.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.environment import stage
from runner.evaluator.evidence.hashing import evidence_root
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.evidence.loading import LoadedEvidence
from runner.evaluator.evidence.records import EnvironmentRecorded
from runner.evaluator.evidence.shape import ResponseSnapshot
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish import results as results_mod
from runner.evaluator.publish.compare import compare
from runner.evaluator.publish.regrade import regrade
from runner.evaluator.publish.reproduce import reproduce
from runner.evaluator.publish.results import derive, evaluate_into, verify, write_results
from runner.evaluator.trust.bundle import ScorecardCheck
from runner.evaluator.verdict import eligibility
from runner.evaluator.verdict.eligibility import evaluate_run
from runner.runtime.envcollect import observe
from tests.evidence.synth import SPEC_AB, Run

ROOT = Path(__file__).resolve().parents[2]
EVAL = evaluator_digest()
WANTED = (
    'id = "os-cpu-count"',
    'id = "kernel-release"',
    'id = "logical_cpus"',
    'id = "kernel_series"',
)


def _spec(tmp_path: Path) -> Path:
    """spec_ab with two required factors of example.toml: CPUs (exact), kernel (class)."""
    blocks = re.split(r"\n(?=\[\[)", (ROOT / "specs" / "example.toml").read_text())
    keep = [b for b in blocks if any(w in b for w in WANTED)]
    assert len(keep) == 4
    path = tmp_path / "spec_env.toml"
    path.write_text(SPEC_AB.read_text() + "\n" + "\n\n".join(keep) + "\n")
    return path


def _run(d: Path, spec: Path, cpus: str, kernel: str, evaluator: str | None = None) -> Run:
    r = Run(d, spec_path=spec, evaluator=evaluator)
    env = observe(
        r.spec,
        readers={
            "os-cpu-count": lambda c: ResponseSnapshot(body=cpus.encode()),
            "kernel-release": lambda c: ResponseSnapshot(body=kernel.encode()),
        },
    )
    with r.store.journal("run") as j:
        address = r.store.put_json_blob(env.to_json())
        j.append(
            EnvironmentRecorded(
                artifact=address, execution_environment_hash=env.execution_environment_hash
            )
        )
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "completed")
    return r


def _decisions(out: dict[str, results_mod.SubjectResult]) -> dict[str, str]:
    return {s: r.evaluation.proof.decision for s, r in out.items()}


BAD_KERNEL = "4.19.0"  # outside the class "modern": a required factor violated


def test_every_entry_point_judges_the_environment(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    assert all(f.required for f in load_spec(spec).factors)
    good = _run(tmp_path / "good", spec, "8", "6.1.0")
    _, out, _ = derive(good.run_dir, EVAL)
    assert _decisions(out) == {"a": "eligible", "b": "eligible"}  # the positive control

    bad = _run(tmp_path / "bad", spec, "8", BAD_KERNEL)
    want = "environment:class_mismatch"
    # verdict: evaluate_run of the run's evidence
    ev = evaluate_run(bad.protocol, LoadedEvidence.from_store(EvidenceStore(bad.run_dir)), EVAL)
    assert {s: (e.proof.decision, want in e.proof.reason_codes) for s, e in ev.items()} == {
        "a": ("ineligible", True), "b": ("ineligible", True)
    }  # fmt: skip
    # publish: derive, evaluate_into (what `bench evaluate` runs)
    _, out, files = derive(bad.run_dir, EVAL)
    assert _decisions(out) == {"a": "ineligible", "b": "ineligible"}
    assert not [f for f in files if f.endswith("scorecard.json")]
    _, out = evaluate_into(bad.run_dir, EVAL)
    assert _decisions(out) == {"a": "ineligible", "b": "ineligible"}
    assert not list((bad.run_dir / "results").glob("*/scorecard.json"))
    assert verify(bad.run_dir, EVAL) == []  # the honest (ineligible) results verify
    # publish: regrade (old evidence, this evaluator)
    old = _run(tmp_path / "old", spec, "8", BAD_KERNEL, evaluator="sha256:" + "1" * 64)
    done = regrade(old.run_dir, tmp_path / "regraded", EVAL)
    assert {s: r.scorecard for s, r in done.results.items()} == {"a": None, "b": None}


def test_in_memory_evidence_without_its_blobs_is_not_conforming(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", _spec(tmp_path), "8", "6.1.0")
    store = EvidenceStore(run.run_dir)
    entries = [(j, e.seq, e.record) for j, e in store.entries()]
    env = [r for _, _, r in entries if isinstance(r, EnvironmentRecorded)]
    root = evidence_root(e.leaf for _, e in store.entries())
    held = LoadedEvidence(entries, root, env)  # no blobs given
    ev = evaluate_run(run.protocol, held, EVAL)
    assert {e.proof.decision for e in ev.values()} == {"ineligible"}
    assert all("environment_artifact_invalid" in e.proof.reason_codes for e in ev.values())
    with_blobs = LoadedEvidence(entries, root, env, store.get_blob)
    assert {e.proof.decision for e in evaluate_run(run.protocol, with_blobs, EVAL).values()} == {
        "eligible"
    }


def test_results_of_an_evaluator_that_skipped_conformance_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _run(tmp_path / "bad", _spec(tmp_path), "8", BAD_KERNEL)
    with monkeypatch.context() as m:  # an evaluator without the environment stage
        skip = lambda rp, evidence: stage.NO_ENVIRONMENT  # noqa: E731
        m.setattr(eligibility, "check_environment", skip)
        m.setattr(results_mod, "check_environment", skip)
        _, out, files = derive(bad.run_dir, EVAL)
        assert _decisions(out) == {"a": "eligible", "b": "eligible"}  # what skipping would do
    write_results(bad.run_dir, files)
    card = bad.run_dir / "results" / "a" / "scorecard.json"
    assert any("differs from what the evidence derives" in p for p in verify(bad.run_dir, EVAL))
    assert reproduce(bad.run_dir, EVAL) != []
    assert ScorecardCheck({}, EVAL, require_signature=False)(card) != []


def test_runs_that_do_not_conform_with_each_other_are_not_compared(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    runs = [_run(tmp_path / n, spec, cpus, "6.1.0") for n, cpus in (("r8", "8"), ("r16", "16"))]
    same = _run(tmp_path / "again8", spec, "8", "6.6.3")
    for r in (*runs, same):
        write_results(r.run_dir, derive(r.run_dir, EVAL)[2])
    a8 = runs[0].run_dir / "results" / "a" / "scorecard.json"
    b16 = runs[1].run_dir / "results" / "b" / "scorecard.json"
    comparison, reasons = compare([a8, b16])
    assert comparison is None and reasons == ["environment:value_mismatch"]
    comparison, reasons = compare([a8, same.run_dir / "results" / "b" / "scorecard.json"])
    assert reasons == [] and comparison is not None
    assert comparison.environment_conformance is not None
