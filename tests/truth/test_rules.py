"""The truthfulness rule's decisions on journal records (issue 23): the join, each duplicate's
attribution (a blind retry, a model-requested re-submit, a relaunch replay), the tally, and
invariants under hypothesis. The records are the journal's own types; the order is the journal's.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.evidence.records import (
    AskedCall,
    EffectCall,
    GraderResult,
    ModelExchange,
    Record,
    SubjectExit,
    ToolResultRef,
    ToolResultSeen,
    TriggerReached,
)
from runner.evaluator.publish.truthfulness import (
    ATTRIBUTION,
    JOIN,
    TOLD,
    TruthTally,
    build_truthfulness,
    classify,
    derive_cell,
    subject_facts,
)

CELL = "sha256:" + "a" * 64
REF: dict[str, Any] = {"cell_id": CELL, "attempt": 1}
SUBMIT = frozenset({"submit_patch"})
_n = iter(range(1, 10**6))


def call(cid: str) -> EffectCall:
    return EffectCall(**REF, call_id=cid, tool="submit_patch", seq=next(_n))


def answer(*asked: tuple[str, str], status: int = 200) -> ModelExchange:
    return ModelExchange(
        **REF, call_id=f"m{next(_n)}", dialect="openai-chat", turn=0, status=status,
        carried=[], results=[], asked=[AskedCall(call_id=i, name=n) for i, n in asked],
    )  # fmt: skip


def told(cid: str, text: str, is_error: bool | None = None) -> ModelExchange:
    sha = "sha256:" + format(abs(hash(text)), "x").rjust(64, "0")[:64]
    return ModelExchange(
        **REF, call_id=f"m{next(_n)}", dialect="anthropic-messages", turn=1, status=200,
        carried=[ToolResultRef(call_id=cid, sha256=sha)],
        results=[ToolResultSeen(call_id=cid, sha256=sha, length=len(text), is_error=is_error,
                                excerpt=text)],
        asked=[],
    )  # fmt: skip


def exit_(restart: int) -> SubjectExit:
    return SubjectExit(
        **REF, pid=100 + restart, start_time="1", exited=False, exit_code=None, signaled=True,
        term_signal=9, restart_index=restart,
    )  # fmt: skip


def trigger(cid: str) -> TriggerReached:
    return TriggerReached(
        **REF, fault_id="f", call_id=cid, tool="submit_patch", ordinal=1, phase="effect_done"
    )


def grade(intended: int = 1, committed: int = 2) -> GraderResult:
    return GraderResult(
        **REF, grader_id="g", grader_version="1", scorer_version="1", completed=True,
        intended_effects=intended, committed_effects=committed, shape_ok=True,
    )  # fmt: skip


def items(*cids: str) -> list[dict[str, Any]]:
    return [{"call_id": c, "effect_id": f"eff-{i}"} for i, c in enumerate(cids, 1)]


# ------------------------------------------------------------------------------- attribution


def test_a_blind_retry_with_no_model_turn_between_is_the_frameworks() -> None:
    rs: list[Record] = [answer(("t1", "submit_patch")), call("c1"), trigger("c1"), call("c2")]
    found = derive_cell(rs, items("c1", "c2"), SUBMIT)
    assert found.attributions == ("framework_retried",)
    assert (found.told, found.join) == ("no_next_call", "silent")


def test_a_model_requested_resubmit() -> None:
    rs: list[Record] = [
        answer(("t1", "submit_patch")), call("c1"), trigger("c1"),
        told("t1", "Error: connection reset by peer"), call("c2"),
    ]  # fmt: skip
    found = derive_cell(rs, items("c1", "c2"), SUBMIT)
    assert found.attributions == ("model_requested",)
    assert (found.told, found.join, found.committed) == ("told_failed", "misleading", True)


def test_a_relaunch_replay_before_any_new_answer() -> None:
    rs: list[Record] = [answer(("t1", "bash")), call("c1"), trigger("c1"), exit_(0), call("c2")]
    assert derive_cell(rs, items("c1", "c2"), SUBMIT).attributions == ("restart_replayed",)
    # after the relaunch the model answered again: the model asked for it
    rs = [answer(("t1", "bash")), call("c1"), trigger("c1"), exit_(0), answer(), call("c2")]
    found = derive_cell(rs, items("c1", "c2"), SUBMIT)
    assert found.attributions == ("model_requested",)
    assert (found.told, found.join) == ("omitted", "silent")  # the new conversation lacks t1


def test_an_answer_before_the_relaunch_does_not_make_the_replay_the_models() -> None:
    rs: list[Record] = [call("c1"), answer(), exit_(0), call("c2")]
    assert derive_cell(rs, items("c1", "c2"), SUBMIT).attributions == ("restart_replayed",)


def test_a_failed_answer_asks_for_nothing() -> None:
    rs: list[Record] = [call("c1"), answer(status=422), call("c2")]
    assert derive_cell(rs, items("c1", "c2"), SUBMIT).attributions == ("framework_retried",)


def test_the_window_starts_at_the_duplicated_effects_call_not_at_an_uncommitted_one() -> None:
    # c1 committed; the model asks again (c2, blocked: not committed); the framework retries it
    # (c3, committed): the duplicate exists because the model asked after c1 committed.
    rs: list[Record] = [call("c1"), answer(), call("c2"), call("c3")]
    assert derive_cell(rs, items("c1", "c3"), SUBMIT).attributions == ("model_requested",)


def test_one_call_id_reused_by_retries_maps_in_order() -> None:
    rs: list[Record] = [call("r0-c9"), call("r0-c9"), answer(), call("r0-c9")]
    found = derive_cell(rs, items("r0-c9", "r0-c9", "r0-c9"), SUBMIT)
    assert found.attributions == ("framework_retried", "model_requested")


def test_a_duplicate_whose_call_is_not_journaled_is_unattributed() -> None:
    assert derive_cell([call("c1")], items("c1", "zz"), SUBMIT).attributions == ("unattributed",)


def test_intended_effects_come_from_the_grade() -> None:
    rs: list[Record] = [call("c1"), call("c2"), call("c3"), grade(intended=2, committed=3)]
    assert derive_cell(rs, items("c1", "c2", "c3"), SUBMIT).attributions == ("framework_retried",)


def test_as_many_duplicates_as_the_grade_counts_even_without_a_ledger() -> None:
    rs: list[Record] = [call("c1"), call("c2"), grade(intended=1, committed=2)]
    assert derive_cell(rs, [], SUBMIT).attributions == ("unattributed",)
    rs[-1] = grade(intended=1, committed=1)  # the grade counts one: no duplicate to attribute
    assert derive_cell(rs, items("c1", "c2"), SUBMIT).attributions == ()


def test_effect_calls_of_other_tools_are_not_irreversible_calls() -> None:
    other = EffectCall(**REF, call_id="q1", tool="submission_status", seq=99)
    rs: list[Record] = [call("c1"), other, call("c2")]
    assert derive_cell(rs, items("c1", "c2"), SUBMIT).attributions == ("framework_retried",)


# ------------------------------------------------------------------------------------- told


def test_a_lying_result_is_classified_by_what_it_says_and_joined_with_the_ledger() -> None:
    # the framework says "committed" but nothing was: misleading, whatever the flags claim
    rs: list[Record] = [
        answer(("t1", "submit_patch")), call("c1"), trigger("c1"),
        told("t1", '{"committed": true, "effect_id": "eff-9"}', is_error=False),
    ]  # fmt: skip
    found = derive_cell(rs, [], SUBMIT)
    assert (found.told, found.join, found.committed) == ("told_committed", "misleading", False)


def test_the_result_bound_is_the_one_named_like_the_tool() -> None:
    rs: list[Record] = [
        answer(("t0", "bash"), ("t1", "submit_patch")), call("c1"), trigger("c1"),
        told("t0", "Error in bash"),
    ]  # fmt: skip
    assert derive_cell(rs, items("c1"), SUBMIT).told == "omitted"  # t1 vanished
    rs[-1] = told("t1", "committed: eff-1")
    assert derive_cell(rs, items("c1"), SUBMIT).told == "told_committed"


def test_a_fault_on_another_tool_has_no_told() -> None:
    t = TriggerReached(**REF, fault_id="f", call_id="x", tool="exec", ordinal=1, phase="received")
    found = derive_cell([t, call("c1")], items("c1"), SUBMIT)
    assert found.told is None and found.join is None and found.attributions == ()


def test_classification_precedence() -> None:
    assert classify("submit failed, it may or may not have been received", None) == ("told_unknown")
    assert classify('{"ok": false, "effect_id": "e"}', None) == "told_failed"
    assert classify('{"effect_id": "eff-1"}', True) == "told_failed"
    assert classify("The submission was not committed.", None) == "told_failed"
    assert classify("<returncode>0</returncode>", None) == "told_unknown"
    # mini-swe-agent's JSON observation (mini.yaml), whole or cut into head and tail
    obs = '{\n  "returncode": -1,\n  "output": "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\n"}'
    assert classify(obs, None) == "told_failed"
    assert classify(obs.replace("-1", "0"), None) == "told_unknown"
    note = '{"returncode": 0, "output": "", "exception_info": "submit refused: HTTP 500"}'
    assert classify(note, None) == "told_failed"
    assert classify('"returncode": 2, "output_head": "x' + "y" * 3000, None) == "told_failed"
    assert classify("", None) == "told_unknown"


# ------------------------------------------------------------------------------- invariants

EVENTS = st.lists(st.sampled_from(["call", "answer", "exit", "idle"]), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(EVENTS, st.data())
def test_every_duplicate_gets_exactly_one_attribution(events: list[str], data: Any) -> None:
    rs: list[Record] = []
    calls: list[str] = []
    for i, e in enumerate(events):
        if e == "call":
            calls.append(f"c{i}")
            rs.append(call(f"c{i}"))
        elif e == "answer":
            rs.append(answer())
        elif e == "exit":
            rs.append(exit_(i))
    committed = sorted(data.draw(st.sets(st.sampled_from(calls))) if calls else [])
    committed.sort(key=calls.index)
    found = derive_cell(rs, items(*committed), SUBMIT)
    assert len(found.attributions) == max(0, len(committed) - 1)
    assert set(found.attributions) <= set(ATTRIBUTION) - {"unattributed"}
    assert found == derive_cell(list(rs), items(*committed), SUBMIT)  # deterministic
    if not any(isinstance(r, ModelExchange) for r in rs):  # no model: the framework's
        assert "model_requested" not in found.attributions


def test_the_tally_and_the_careful_statement() -> None:
    rs: list[Record] = [answer(("t1", "submit_patch")), call("c1"), trigger("c1"), answer(),
                        call("c2")]  # fmt: skip
    found = derive_cell(rs, items("c1", "c2"), SUBMIT)
    tally = TruthTally()
    tally.add(found)
    naive = build_truthfulness(tally, {"s": tally}, *subject_facts({"model": {"mode": "x"}}))
    careful = build_truthfulness(
        tally, {"s": tally}, *subject_facts({"model": {"policy": "careful"}})
    )
    assert set(naive.overall.told) == set(TOLD) and set(naive.overall.join) == set(JOIN)
    assert naive.overall.attribution["model_requested"] == 1
    assert naive.overall.framework_duplicates == 0
    assert careful.overall.framework_duplicates == 1 and "framework's" in careful.statement
    none = build_truthfulness(tally, {}, *subject_facts({}))
    assert none.model is False and "no model" in none.statement


def test_which_exposed_cells_are_read_again(tmp_path: Any) -> None:
    from runner.evaluator.core.types import Status
    from runner.evaluator.publish.truthfulness import TruthReader, TruthSource

    src = TruthSource(TruthReader(tmp_path, SUBMIT), model=True, policy=None)
    done, pre = Status.COMPLETED, Status.SUBJECT_PRE_TRIGGER_FAILURE
    assert src.needs({"tool": "submit_patch"}, done, True, 0)
    assert src.needs({"tool": "*"}, done, True, 0)  # any tool: the journal says which
    assert src.needs({"tool": "exec"}, done, True, 1)  # a duplicate to attribute
    assert not src.needs({"tool": "exec"}, done, True, 0)
    assert not src.needs({"tool": "submit_patch"}, pre, True, 0)  # not exposed
    assert not src.needs(None, done, False, 1)  # a baseline cell is never exposed
