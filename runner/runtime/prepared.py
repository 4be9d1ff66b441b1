"""The protocol of a run, prepared once: the spec's bytes (one bounded read), the parsed spec,
the resolved matrix, the witness contracts, the identities and the freeze state.

`bench run` (create and `--resume`), a cluster worker, `bench worker`'s host checks and `bench
reproduce --rerun` each read the spec file exactly once, here, and pass this value on; nothing
downstream opens the spec again (tests/runtime/test_prepared.py counts the opens). Everything a
run writes about its spec (protocol.json's `spec_text`, `run_started`'s digest, the digest a
cluster worker checks its own copy against) comes from these same bytes.

The witness contracts are read from `witnesses/` when a run is created and recorded in its
protocol.json; a resumed run takes them from there (`for_run`), and so does every attempt
(`RunServices(contracts=...)`): an edit to `witnesses/` after a run began is not the run's
(it changes `evaluator_digest`, so a resume is refused as another protocol).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from runner.evaluator.core.bounded import SPEC_CAP, read_bounded
from runner.evaluator.core.canonical import (
    sha256_digest,
)
from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.protocol import specload
from runner.evaluator.protocol.identities import Identities, compute
from runner.evaluator.protocol.matrix import ResolvedMatrix, resolve
from runner.evaluator.protocol.runfile import RunProtocol, subject_roles
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.witness import WitnessContract, load_contracts


def read_spec_bytes(path: Path) -> bytes:
    """The spec file's bytes: a regular file, size-capped, read without blocking (the one read)."""
    try:
        return read_bounded(path, SPEC_CAP)
    except InputError as exc:
        raise InputError(f"cannot read spec: {exc.message}", file=str(path)) from exc


def parse_spec(data: bytes, path: Path) -> Spec:
    """`specload.load_spec` on bytes already read: decoded, then the evaluator's `parse_spec`
    (the same checks and located errors). `path` names the file in errors and anchors its
    relative task paths."""
    name = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read spec: not UTF-8 text (byte {exc.start})", file=name) from exc
    return specload.parse_spec(text, path)


@dataclass(frozen=True)
class SpecSource:
    """A spec file as read once: its path, its bytes, the spec they parse to."""

    path: Path
    data: bytes
    spec: Spec

    @classmethod
    def read(cls, path: Path) -> SpecSource:
        data = read_spec_bytes(path)
        return cls(path, data, parse_spec(data, path))

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")  # decoded once already by parse_spec: cannot fail

    @cached_property
    def digest(self) -> str:
        """`sha256:` of the bytes (what a cluster worker checks its own copy against)."""
        return sha256_digest(self.data)


@dataclass(frozen=True)
class PreparedProtocol:
    """Everything a run needs of its spec, computed once (see the module docstring).

    `status` is None when the freeze log was not consulted: a worker (the coordinator holds
    the freeze record) and a resumed run (its record is protocol.json's, `freeze_record`)."""

    source: SpecSource
    matrix: ResolvedMatrix
    contracts: Mapping[str, WitnessContract]
    identities: Identities
    status: freezing.ProtocolStatus | None
    freeze_record: freezing.FreezeRecord | None

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def spec(self) -> Spec:
        return self.source.spec

    def require_runnable(self, allow_draft: bool) -> None:
        """A changed frozen protocol never runs; a draft only when the caller allows it."""
        if self.status is None:  # a worker's or a resumed run's value: never a new run's
            raise ValueError("a new run needs the freeze state: prepare(source, freeze=True)")
        where = str(self.path)
        if self.status is freezing.ProtocolStatus.AMENDMENT_REQUIRED:
            raise InputError(
                "frozen protocol changed: amendment required (run `bench amend SPEC --reason`"
                " or restore the frozen spec)",
                file=where,
            )
        if self.status is freezing.ProtocolStatus.DRAFT and not allow_draft:
            raise InputError(
                "this protocol is a draft: freeze it (`bench freeze SPEC`) or pass --draft to "
                "collect evidence only (a draft never yields a scorecard)",
                file=where,
            )

    def run_protocol(self, run_id: str, *, draft_only: bool = False) -> RunProtocol:
        """protocol.json of a new run: the spec text is these bytes, the contracts these ones.
        `draft_only` (a subset run) records no freeze even under a frozen spec."""
        frozen = self.status is freezing.ProtocolStatus.FROZEN and not draft_only
        return RunProtocol(
            run_id=run_id,
            spec_name=self.path.name,
            spec_text=self.source.text,
            identities=self.identities,
            slots=self.matrix.slots,
            contracts=list(self.contracts.values()),
            freeze_record=self.freeze_record if frozen else None,
            subject_roles=subject_roles(self.spec),
        )


def prepare(
    source: SpecSource,
    *,
    contracts: Mapping[str, WitnessContract] | None = None,
    freeze: bool = True,
) -> PreparedProtocol:
    """The protocol of `source`: contracts from `witnesses/` unless given; with `freeze`, the
    freeze log's state (believed only as its signed head covers it)."""
    spec = source.spec
    matrix = resolve(spec)
    if contracts is None:
        contracts = load_contracts(project_root() / "witnesses")
    ids = compute(spec, source.path, matrix, dict(contracts))
    status, record = None, None
    if freeze:
        from runner.evaluator.trust.head import freeze_anchor
        from runner.evaluator.trust.keys import trusted_keys

        status, record = freezing.status(source.path, ids, freeze_anchor(trusted_keys))
    return PreparedProtocol(source, matrix, contracts, ids, status, record)


def for_run(source: SpecSource, rp: RunProtocol) -> PreparedProtocol:
    """`source` prepared to continue the run of `rp` (its protocol.json): the contracts and the
    freeze record are the run's; a spec that resolves to another protocol is refused."""
    prepared = prepare(source, contracts=rp.contract_map(), freeze=False)
    if prepared.identities.protocol_hash != rp.identities.protocol_hash:
        raise InputError(
            f"the run was made under protocol {rp.identities.protocol_hash}, the spec now "
            f"resolves to {prepared.identities.protocol_hash}; a run continues only under its "
            "own protocol",
            file=str(source.path),
        )
    return replace(prepared, freeze_record=rp.freeze_record)
