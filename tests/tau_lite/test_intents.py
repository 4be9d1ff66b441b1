"""The duplicate table is true: every kept task's every expected write, repeated right after
it committed, does what intents.REPEAT (and docs/TAU-LITE.md) says; and the grade counts a
repeat as a duplicate exactly when it is one."""

from __future__ import annotations

from collections import Counter

from runner.benchmarks.tau_lite import domains
from runner.benchmarks.tau_lite.grade import grade
from runner.benchmarks.tau_lite.intents import INTENTS, REPEAT


def test_every_write_tool_has_a_rule() -> None:
    for domain in domains.TOOLS:
        assert set(REPEAT[domain]) == set(INTENTS[domain]) == set(domains.write_tools(domain))


def test_repeating_each_expected_write_does_what_the_table_says(sets, fresh) -> None:
    seen: Counter[tuple[str, str, str]] = Counter()
    for domain, s in sets.items():
        for t in s.tasks.values():
            store = fresh(domain)
            writes = {w.name for w in t.writes}
            repeated = 0
            for a in t.actions:
                first = domains.call(store, a.name, a.arguments, scope="s")
                if a.name not in writes or not first.ok:
                    continue
                again = domains.call(store, a.name, a.arguments, scope="s")
                what = "refused" if not again.ok else "duplicate" if again.changed else "unchanged"
                assert what in REPEAT[domain][a.name], (t.id, a.action_id, what, again.error)
                seen[(domain, a.name, what)] += 1
                repeated += what == "duplicate"
            g = grade(store, t, "s")
            assert len(g.duplicates) == repeated, t.id
            # a refused or unchanged repeat leaves the gold state reachable; a duplicate does not
            assert g.completed == (repeated == 0), t.id
            store.close()
    # each tool the tasks exercise was repeated at least once
    exercised = {
        (d, n)
        for d, s in sets.items()
        for t in s.tasks.values()
        for n in {w.name for w in t.writes}
    }
    assert exercised == {(d, n) for d, n, _ in seen}
