"""Grading an attempt from the destination's store, never from the subject's claim.

Completion is tau2's own rule: the final DB hash equals the hash of the state the task's
expected actions produce on the pristine DB (tasks.py replays them). Duplicate effects come
from the ledger (intents.py): a committed call that changed the state is a duplicate when
its intent has already been committed, in this scope, as many times as the expected actions
commit it. Refused calls (`rejected`) and calls that left the state unchanged are never
duplicates. Other wrong writes are not duplicates either: they fail completion via the hash.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from runner.benchmarks.tau_lite.store import Store
from runner.benchmarks.tau_lite.tasks import TauTask


@dataclass(frozen=True)
class TauGrade:
    completed: bool
    state_hash: str
    gold_hash: str
    intended_effects: int  # the expected writes that change the state
    committed: int  # committed calls that changed the state (any intent)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0  # committed calls that left the state as it was

    @property
    def committed_effects(self) -> int:
        """For the evaluator, whose duplicate measure is committed - intended: the intended
        effects plus the recognised duplicates, so that difference is exactly the duplicates
        (distinct wrong writes are a completion failure, not a duplicate)."""
        return self.intended_effects + len(self.duplicates)

    def as_json(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "state_hash": self.state_hash,
            "gold_hash": self.gold_hash,
            "intended_effects": self.intended_effects,
            "committed_changing": self.committed,
            "committed_unchanged": self.unchanged,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
        }


def duplicates(ledger: list[dict[str, Any]], expected: Counter[str]) -> list[dict[str, Any]]:
    """The duplicate effects of one scope's ledger rows (in commit order)."""
    seen: Counter[str] = Counter()
    first: dict[str, str] = {}
    out = []
    for row in ledger:
        if row["outcome"] != "committed" or not row["changed"] or row["intent"] is None:
            continue
        key = row["intent"]
        seen[key] += 1
        first.setdefault(key, row["effect_id"])
        if seen[key] > expected.get(key, 0) and seen[key] > 1:
            out.append(
                {
                    "effect_id": row["effect_id"],
                    "tool": row["tool"],
                    "intent": key,
                    "repeats": first[key],
                    "call_id": row["call_id"],
                }
            )
    return out


def final_state(rows: list[dict[str, Any]], pristine_hash: str) -> str:
    """The state an attempt's store ends in, from its ledger alone: the `state_after` of the
    last commit (a refused call changes nothing), the pristine state when nothing committed.
    One store per attempt, so the attempt's scope holds every commit."""
    committed = [r for r in rows if r["outcome"] == "committed"]
    return str(committed[-1]["state_after"]) if committed else pristine_hash


def grade(store: Store, task: TauTask, scope: str) -> TauGrade:
    if store.domain != task.domain:
        raise ValueError(f"{store.path}: a {store.domain} store cannot grade {task.id}")
    return grade_ledger(store.ledger(scope), task, store.state_hash())


def grade_ledger(rows: list[dict[str, Any]], task: TauTask, state: str) -> TauGrade:
    """The grade of one scope's ledger rows, given the final state's hash."""
    changing = [r for r in rows if r["outcome"] == "committed" and r["changed"]]
    return TauGrade(
        completed=state == task.gold_hash,
        state_hash=state,
        gold_hash=task.gold_hash,
        intended_effects=sum(task.expected_intents.values()),
        committed=len(changing),
        duplicates=duplicates(rows, task.expected_intents),
        rejected=[
            {"effect_id": r["effect_id"], "tool": r["tool"], "error": r["error"]}
            for r in rows
            if r["outcome"] == "rejected"
        ],
        unchanged=sum(1 for r in rows if r["outcome"] == "committed" and not r["changed"]),
    )
