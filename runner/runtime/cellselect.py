"""`bench run --only`: a subset of a spec's cells, for developing an agent.

Grammar (each `--only` value; several `--only` options add up):

    --only KEY=VALUE[,VALUE...][,KEY=VALUE[,VALUE...]...]
    KEY   = task | fault | subject | seed
    fault = a declared fault id, or `none` / `baseline` for the baseline cells

Values of one key are alternatives (OR), different keys all apply (AND); a key not given keeps
every value. `--only task=a,b,fault=none --only fault=lost-submit-response` runs tasks a and b,
each at baseline and under lost-submit-response, for every subject and seed. An item without
`=` continues the key before it (ids hold no `=` or `,`).

An unknown key or value, or a selection that keeps no cell, is an InputError (exit 2) naming it
and listing the valid ones, before any run directory exists. A subset is always a draft: the CLI
refuses `--only` without `--draft`, and the run records no freeze even when the spec is frozen,
so it can never mint a scorecard, not even when resumed in full later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from runner.evaluator.core.errors import InputError
from runner.evaluator.protocol.faultkinds import NO_FAULT
from runner.evaluator.protocol.matrix import Cell, iter_slots
from runner.evaluator.protocol.spec import Spec

KEYS = ("task", "fault", "subject", "seed")
BASELINE_ALIASES = frozenset({NO_FAULT, "baseline"})


@dataclass(frozen=True)
class CellSelection:
    """Per key, the values kept (a key absent keeps every value)."""

    chosen: dict[str, frozenset[str]] = field(default_factory=dict)

    def keeps(self, cell: Cell) -> bool:
        have = {
            "task": cell.task_id,
            "fault": cell.fault_id,
            "subject": cell.subject_id,
            "seed": str(cell.seed),
        }
        return all(have[k] in values for k, values in self.chosen.items())

    def describe(self) -> str:
        return " ".join(f"{k}={','.join(sorted(v))}" for k, v in sorted(self.chosen.items()))


def _valid(spec: Spec) -> dict[str, list[str]]:
    faults = sorted(f.id for f in spec.faults)
    return {
        "task": sorted(spec.task_index()),
        "fault": ([NO_FAULT] if spec.matrix.baseline else []) + faults,
        "subject": sorted(s.id for s in spec.subjects),
        "seed": [str(s) for s in spec.matrix.seeds],
    }


def parse_only(values: Sequence[str], spec: Spec, where: str = "--only") -> CellSelection:
    """The selection `values` (each one `--only` option) make over `spec`'s matrix."""
    valid = _valid(spec)
    chosen: dict[str, set[str]] = {}
    for raw in values:
        key: str | None = None
        for item in raw.split(","):
            item = item.strip()
            if "=" in item:
                key, _, value = item.partition("=")
                key, value = key.strip(), value.strip()
            else:
                value = item
            if key is None:
                raise InputError(
                    f"{where} {raw!r}: {item!r} names no key; write KEY=VALUE with KEY one of "
                    f"{', '.join(KEYS)}",
                    key=where,
                )
            if key not in KEYS:
                raise InputError(
                    f"{where} {raw!r}: unknown key {key!r}; valid keys: {', '.join(KEYS)}",
                    key=where,
                )
            if key == "fault" and value in BASELINE_ALIASES:
                value = NO_FAULT
            if value not in valid[key]:
                listed = ", ".join(valid[key]) or "(none)"
                raise InputError(
                    f"{where} {raw!r}: unknown {key} {value!r}; valid {key} values: {listed}",
                    key=where,
                )
            chosen.setdefault(key, set()).add(value)
    selection = CellSelection({k: frozenset(v) for k, v in chosen.items()})
    if chosen and not _any_slot(spec, selection):
        raise InputError(
            f"{where} {selection.describe()}: keeps no cell of the matrix (does each fault apply "
            "to the tasks chosen? see `bench plan`)",
            key=where,
        )
    return selection


def _any_slot(spec: Spec, selection: CellSelection) -> bool:
    subjects = selection.chosen.get("subject")
    if subjects is not None and not subjects:
        return False
    other = {k: v for k, v in selection.chosen.items() if k != "subject"}
    for s in iter_slots(spec):
        have = {"task": s.task_id, "fault": s.schedule.fault_id, "seed": str(s.seed)}
        if all(have[k] in v for k, v in other.items()):
            return True
    return False
