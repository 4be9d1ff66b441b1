"""Small synthetic run directories for the hardening tests: the evidence tests' synth runs, plus
a run journal (run_started + an environment record naming a blob), so the layout, reference and
binding checks have every kind of file to refuse."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from runner.evaluator.core.canonical import sha256_digest
from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.evidence.records import EnvironmentRecorded, RunStarted
from runner.evaluator.protocol.matrix import Slot
from runner.evaluator.publish.results import derive, write_results
from tests.evidence.synth import Run

Outcome = Callable[[int, Slot], str | None]


def run_journal(r: Run) -> str:
    """Write journals/run.jsonl as the executor does; returns the environment blob's address."""
    rp = r.protocol
    with r.store.journal("run") as j:
        j.append(
            RunStarted(
                run_id=rp.run_id,
                spec_path=f"specs/{rp.spec_name}",
                spec_digest=sha256_digest(rp.spec_text.encode()),
                protocol_hash=rp.identities.protocol_hash,
                protocol_status="frozen" if rp.freeze_record is not None else "draft",
                identities=rp.identities.model_dump(mode="json"),
            )
        )
        address = r.store.put_json_blob({"environment": "synthetic"})
        j.append(EnvironmentRecorded(artifact=address, execution_environment_hash=address))
    return address


def evaluated(run_dir: Path, b: Outcome = lambda i, s: "completed", **kw: object) -> Run:
    """a completes every cell, b has outcome b(i, slot); run journal and blob; results written."""
    r = Run(run_dir, **kw)  # type: ignore[arg-type]
    run_journal(r)
    r.fill("a", lambda i, s: "completed")
    r.fill("b", b)
    _, _, files = derive(run_dir, evaluator_digest())
    write_results(run_dir, files)
    from runner.signing.sign import sign_if_keyed

    sign_if_keyed(run_dir, lambda _: None)  # as `bench evaluate` does (the session's test key)
    return r


def copy_run(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest
