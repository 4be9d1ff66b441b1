"""`bench plan | freeze | amend`: a spec resolved into what a run of it would be, before anything
runs: its cells per stratum, every identity, the freeze state (the log held against its signed
head) and the preregistered power of every planned paired comparison; its freeze and amendment
records. The CLI only displays them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.protocol.identities import Identities, compute
from runner.evaluator.protocol.matrix import ResolvedMatrix, resolve
from runner.evaluator.protocol.spec import Spec
from runner.evaluator.protocol.specload import load_spec
from runner.evaluator.publish.stats import DEFAULT_ALPHA, DEFAULT_MDE, planned_power


@dataclass(frozen=True)
class Plan:
    spec: Spec
    matrix: ResolvedMatrix
    identities: Identities
    status: freezing.ProtocolStatus
    strata: dict[str, int]  # stratum -> cells (every subject's)
    power: dict[str, Any]
    warnings: list[str]  # said, not refused: what `bench run` would refuse

    def as_json(self) -> dict[str, Any]:
        """What `bench plan --json` prints."""
        ids, m = self.identities, self.matrix
        return {
            "protocol_hash": ids.protocol_hash,
            "matrix_hash": ids.matrix_hash,
            "policy_hash": ids.policy_hash,
            "evaluator_digest": ids.evaluator_digest,
            "cells": m.cell_count,
            "status": self.status.value,
            "identities": ids.model_dump(mode="json"),
            "strata": self.strata,
            "subjects": dict(sorted(m.subjects.items())),
            "power": self.power,
        }


def plan(spec_path: Path, anchor: freezing.Anchor) -> Plan:
    """Load, resolve and identify the spec; its freeze state under `anchor`."""
    s = load_spec(spec_path)
    m = resolve(s)
    ids = compute(s, spec_path, m)
    state, _ = freezing.status(spec_path, ids, anchor)
    per_slot = Counter(slot.stratum for slot in m.slots)
    strata = {k: v * len(m.subjects) for k, v in sorted(per_slot.items())}
    return Plan(
        s, m, ids, state, strata, planned_powers(s, m), subject_config_warnings(s, spec_path)
    )


def subject_config_warnings(s: Spec, spec_path: Path) -> list[str]:
    """Each subject's config against its adapter's grammar (runtime; nothing built): the
    evaluator plans any declared config (it hashes it as written), `bench run` refuses a bad
    one (exit 2) before any cell runs."""
    from runner.runtime.subjects.registry import check_subject_configs

    try:
        check_subject_configs(s, spec_path)
    except InputError as exc:
        return [f"{exc.render()} (`bench run` refuses it)"]
    return []


def planned_powers(s: Spec, m: ResolvedMatrix) -> dict[str, Any]:
    """The preregistered power of every planned paired comparison (issue 25): each pair of
    subjects, overall and per stratum, from its tasks and pairs (slots, replicates included),
    at [comparison] alpha and minimum_detectable_effect (publish/stats.planned_power)."""
    alpha = s.comparison.alpha or DEFAULT_ALPHA
    mde = s.comparison.minimum_detectable_effect or DEFAULT_MDE
    groups: dict[str, list[str]] = {"all": []}
    for slot in m.slots:
        groups["all"].append(slot.task_id)
        groups.setdefault(slot.stratum, []).append(slot.task_id)
    n = len(m.subjects)
    rows = []
    for stratum, tasks in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0])):
        p = planned_power(len(set(tasks)), len(tasks), alpha, mde)
        rows.append({"stratum": stratum, **p.model_dump(mode="json")})
    return {
        "alpha": alpha,
        "minimum_detectable_effect": mde,
        "replicates": s.matrix.replicates or 1,
        "subject_pairs": n * (n - 1) // 2,
        "comparisons": rows if n > 1 else [],
        "below_80_percent": sorted(r["stratum"] for r in rows if r["power"] < 0.8) if n > 1 else [],
    }


def _identities(spec_path: Path) -> Identities:
    return compute(load_spec(spec_path), spec_path)


def freeze(
    spec_path: Path,
    reason: str,
    anchor: Callable[[], freezing.Anchor],
    sealer: Callable[[], freezing.Sealer],
) -> freezing.FreezeRecord:
    """`bench freeze`: a freeze record binding the spec's protocol_hash (no-op if frozen). The
    anchor and sealer are made after the spec is read (a bad spec is named before a missing key)."""
    ids = _identities(spec_path)
    return freezing.freeze(spec_path, ids, reason, anchor=anchor(), sealer=sealer())


def amend(
    spec_path: Path,
    reason: str,
    anchor: Callable[[], freezing.Anchor],
    sealer: Callable[[], freezing.Sealer],
) -> freezing.FreezeRecord:
    """`bench amend`: the new protocol_hash with its parent and the reason."""
    ids = _identities(spec_path)
    return freezing.amend(spec_path, ids, reason, anchor=anchor(), sealer=sealer())
