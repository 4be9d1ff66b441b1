"""What one run shares across its attempts: `RunServices` (lock, the sandbox backend's service,
reaper, evidence store, subject launcher, witness contracts)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

from runner.evaluator.core.inputs import project_root
from runner.evaluator.evidence.journal import EvidenceStore
from runner.evaluator.protocol.faultkinds import (
    FaultKind,
)
from runner.evaluator.protocol.witness import WitnessContract, load_contracts
from runner.runtime.attempt.orphans import archive_orphan_ledgers, remove_partial_blobs
from runner.runtime.host import naming, paths
from runner.runtime.host.procs import Reaper, SubjectLauncher
from runner.runtime.sandbox import registry
from runner.runtime.sandbox.base import Sandbox, SandboxSpec


class RunServices:
    """One per run: liveness lock, the sandbox backend's service (`sandbox_backend`, a name in
    runner/runtime/sandbox/registry.py; Podman's is a private `podman system service`), one
    reaper, the evidence store.

    The run directory is made root-only (0700): subjects run as `nobody` and cannot write
    evidence. Subject state directories live under `subject_root` (default
    /var/tmp/afb-subjects/<run id>), removed on exit unless `keep_subject_dirs`.
    """

    def __init__(
        self,
        run_id: str,
        run_dir: Path,
        *,
        subject_root: Path | None = None,
        keep_subject_dirs: bool = False,
        witnesses_dir: Path | None = None,
        sandbox_backend: str = registry.DEFAULT,
        contracts: Mapping[FaultKind, WitnessContract] | None = None,
    ) -> None:
        self.backend = registry.backend(sandbox_backend)
        self.run_id = naming.check_run_id(run_id)
        self.run_dir = Path(run_dir).resolve()  # the podman socket URL must be absolute
        self.subject_root = subject_root or paths.SUBJECT_ROOT / run_id
        self.keep_subject_dirs = keep_subject_dirs
        self.witnesses_dir = witnesses_dir or project_root() / "witnesses"
        self._stack = ExitStack()
        self.sandboxes: registry.SandboxService
        self.reaper: Reaper
        self.evidence: EvidenceStore
        self.launcher: SubjectLauncher
        # a run's own contracts (its protocol.json's); else read from witnesses_dir on entry
        self._given = dict(contracts) if contracts is not None else None
        self.contracts: dict[FaultKind, WitnessContract]

    def __enter__(self) -> RunServices:
        self.contracts = (
            self._given if self._given is not None else load_contracts(self.witnesses_dir)
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        os.chown(self.run_dir, 0, 0)
        os.chmod(self.run_dir, 0o700)
        try:
            self._stack.enter_context(naming.hold_run(self.run_id))
            # The service's socket and log are runtime state, not evidence: outside the run dir.
            self.sandboxes = self._stack.enter_context(
                self.backend.service(self.run_id, paths.SANDBOX_ROOT / self.run_id)
            )
            self.reaper = self._stack.enter_context(Reaper())
            self.evidence = EvidenceStore(self.run_dir)
            # what a runner that died mid-attempt left behind (the run's lock is held)
            remove_partial_blobs(self.run_dir)
            archive_orphan_ledgers(self.run_dir, self.evidence)
            self.launcher = SubjectLauncher(self.run_id, self.reaper)
            self.subject_root.mkdir(parents=True, exist_ok=True, mode=0o711)
            os.chmod(self.subject_root, 0o711)  # traversable, not listable, by subjects
        except BaseException:
            self._stack.close()
            raise
        return self

    def sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A sandbox of this run's backend (not yet created)."""
        return self.sandboxes.sandbox(spec)

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._stack.close()
        finally:
            shutil.rmtree(paths.SANDBOX_ROOT / self.run_id, ignore_errors=True)
            with contextlib.suppress(OSError):  # empty once every ledger is archived
                (self.run_dir / "destination").rmdir()
            if not self.keep_subject_dirs:
                shutil.rmtree(self.subject_root, ignore_errors=True)
