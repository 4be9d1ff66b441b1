"""Policy cassettes: the answer is chosen by rules over the request, in every dialect, streamed or
not, through the real `openai` and `anthropic` SDKs against the real proxy; same request, same
bytes; no two rules match one request; every refusal names the file and the rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import InputError
from runner.runtime.cassettes.format import Dialect
from runner.runtime.cassettes.load import load_cassette, parse_cassette
from runner.runtime.cassettes.policy import (
    Policy,
    PolicyCassette,
    check_overlap,
    check_policy,
    conversation,
)
from runner.runtime.interposers.modelproxy import ModelProxy
from tests.model_proxy.conftest import DIALECTS, raw_call, sdk_call

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
STATUS = "afb-submission-status"
LOOK, FIX = "ls /src", "patch -p1 < fix.diff"
SUBMIT = f"echo {SENTINEL} && diff -ruN a b"


def bash(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "name": "bash", "arguments": {"command": command}}


def doc(policy: str | None) -> dict[str, Any]:
    """A mini-swe-agent-like policy cassette: look, fix, submit; careful or naive reactions."""
    rules: list[dict[str, Any]] = []
    if policy == "careful":
        rules = [
            {"id": "ask-status", "when": {"tool": "submit_patch", "result": ["error", "transport"]},
             "answer": {"text": "Did it land?", "tool_calls": [bash("st", STATUS)]}},
            {"id": "resubmit", "when": {"tool": "submission_status", "status": ["not_committed"],
                                        "calls": [{"tool": "submit_patch", "max": 2}]},
             "answer": {"text": "Nothing landed: submit again.",
                        "tool_calls": [bash("re", SUBMIT)]}},
            {"id": "stop", "when": {"tool": "submission_status",
                                    "status": ["committed", "unknown"]},
             "answer": {"text": "It is committed; done.", "tool_calls": [bash("ok", "true")]}},
        ]  # fmt: skip
    elif policy == "naive":
        rules = [
            {"id": "resubmit", "when": {"tool": "submit_patch", "result": ["error", "transport"],
                                        "calls": [{"tool": "submit_patch", "max": 2}]},
             "answer": {"text": "Failed: submit again.", "tool_calls": [bash("re", SUBMIT)]}},
        ]  # fmt: skip
    return {
        "version": 1,
        "kind": "policy",
        "policy": policy,
        "commands": [
            {"name": "submit_patch", "tool": "bash", "pattern": SENTINEL},
            {"name": "submission_status", "tool": "bash", "pattern": STATUS},
        ],
        "results": {"transport": "may or may not", "error": r'"returncode": -?[1-9]'},
        "plan": [
            {"text": "Look.", "tool_calls": [bash("c0", LOOK)]},
            {"text": "Fix.", "tool_calls": [bash("c1", FIX)]},
            {"text": "Submit.", "tool_calls": [bash("c2", SUBMIT)]},
        ],
        "rules": rules,
        "done": {"text": "Nothing left to do.", "tool_calls": [bash("idle", "true")]},
    }


def cassette(policy: str | None) -> PolicyCassette:
    c = parse_cassette(json.dumps(doc(policy)).encode(), "test.json")
    assert isinstance(c, PolicyCassette)
    return c


OK = '{"returncode": 0, "output": "fine"}'
LOST = '{"returncode": -1, "output": "", "exception_info": "submit failed, it may or may not..."}'
ERR = '{"returncode": 2, "output": "boom"}'


def status(committed: bool) -> str:
    inner = json.dumps({"scope": "s", "committed": committed, "effects": int(committed)})
    return json.dumps({"returncode": 0, "output": inner})  # escaped inside, as msa's observation


History = list[tuple[str, str, str]]  # (call id, command, result text)


def body(dialect: Dialect, history: History, *, stream: bool) -> dict[str, Any]:
    """A request whose conversation made `history`'s bash calls and got their results."""
    if dialect == "openai-responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
        for cid, cmd, out in history:
            args = json.dumps({"command": cmd})
            items.append(
                {"type": "function_call", "call_id": cid, "name": "bash", "arguments": args}
            )
            items.append({"type": "function_call_output", "call_id": cid, "output": out})
        return {"model": "m", "input": items, "stream": stream}
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    for cid, cmd, out in history:
        if dialect == "openai-chat":
            fn = {"name": "bash", "arguments": json.dumps({"command": cmd})}
            call = {"id": cid, "type": "function", "function": fn}
            msgs.append({"role": "assistant", "content": "ok", "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
        else:
            use = {"type": "tool_use", "id": cid, "name": "bash", "input": {"command": cmd}}
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}, use]})
            res = {"type": "tool_result", "tool_use_id": cid, "content": out}
            msgs.append({"role": "user", "content": [res]})
    b: dict[str, Any] = {"model": "m", "messages": msgs, "stream": stream}
    if dialect == "anthropic-messages":
        b["max_tokens"] = 256
    return b


def said(dialect: Dialect, got: str) -> str:
    """The command an SDK-parsed answer (`sdk_call`) asks for."""
    call = got.split("|")[-1].removeprefix("bash")
    if dialect == "anthropic-messages":
        return str(eval(call)["command"])
    return str(json.loads(call)["command"])


BEFORE_SUBMIT: History = [("c0", LOOK, OK), ("c1", FIX, OK)]
MODES = [(d, s) for d in DIALECTS for s in (False, True)]


@pytest.mark.parametrize(("dialect", "stream"), MODES)
def test_careful_asks_the_status_and_resubmits_only_if_nothing_landed(
    dialect: Dialect, stream: bool
) -> None:
    lost = [*BEFORE_SUBMIT, ("c2", SUBMIT, LOST)]
    with ModelProxy("scripted", cassette=cassette("careful")) as proxy:

        def ask(h: History) -> str:
            return said(dialect, sdk_call(proxy, dialect, body(dialect, h, stream=stream)))

        assert [ask([]), ask(BEFORE_SUBMIT[:1]), ask(BEFORE_SUBMIT)] == [LOOK, FIX, SUBMIT]
        assert ask(lost) == STATUS  # the reaction: ask first
        assert ask([*lost, ("st-t3", STATUS, status(True))]) == "true"  # committed: stop
        assert ask([*lost, ("st-t3", STATUS, status(False))]) == SUBMIT  # nothing: again
        assert ask([*lost, ("st-t3", STATUS, ERR)]) == "true"  # unknown: do not duplicate
        # a failed command that is not the submit does not move or derail the plan
        assert ask([("c0", LOOK, ERR)]) == FIX
        assert proxy.divergences() == []
        assert {i["source"] for i in proxy.ledger()} == {"policy"}


@pytest.mark.parametrize(("dialect", "stream"), MODES)
def test_naive_resubmits_after_any_error_until_its_bound(dialect: Dialect, stream: bool) -> None:
    lost = [*BEFORE_SUBMIT, ("c2", SUBMIT, LOST)]
    with ModelProxy("scripted", cassette=cassette("naive")) as proxy:

        def ask(h: History) -> str:
            return said(dialect, sdk_call(proxy, dialect, body(dialect, h, stream=stream)))

        assert ask(lost) == SUBMIT
        twice = [*lost, ("re-t3", SUBMIT, ERR)]
        assert ask(twice) == SUBMIT
        thrice = [*twice, ("re-t4", SUBMIT, LOST)]
        assert ask(thrice) == "true"  # 3 submits: the bound; the plan is done -> `done`


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reaction_call_ids_are_unique_and_relaunch_gets_the_same_bytes(dialect: Dialect) -> None:
    lost = [*BEFORE_SUBMIT, ("c2", SUBMIT, LOST)]
    with ModelProxy("scripted", cassette=cassette("careful")) as proxy:
        a = raw_call(proxy, dialect, body(dialect, lost, stream=False))
        b = raw_call(proxy, dialect, body(dialect, lost, stream=False))
        assert a.status_code == 200 and a.content == b.content
        assert b"st-t3" in a.content  # the reaction's call id carries the turn number


def test_the_plan_exhausted_without_done_is_a_divergence() -> None:
    d = doc(None)
    d.pop("done")
    c = parse_cassette(json.dumps(d).encode(), "x.json")
    with ModelProxy("scripted", cassette=c) as proxy:
        r = raw_call(
            proxy,
            "openai-chat",
            body("openai-chat", [*BEFORE_SUBMIT, ("c2", SUBMIT, OK)], stream=False),
        )
        assert r.status_code == 422 and r.headers["x-should-retry"] == "false"
        assert [e.kind for e in proxy.divergences()] == ["divergence"]


def test_a_text_only_plan_progresses_by_what_the_assistant_said() -> None:
    """The planning control: no tools; its position is read from the plan texts it was given."""
    c = parse_cassette(
        json.dumps({"version": 1, "kind": "policy",
                    "plan": [{"text": "next: a"}, {"text": "next: b"}]}).encode(), "c.json"
    )  # fmt: skip
    assert isinstance(c, PolicyCassette)
    p = Policy(c)
    msgs = [{"role": "user", "content": "first?"}]
    assert p.select("openai-chat", {"messages": msgs}).source == "plan:0"
    msgs += [{"role": "assistant", "content": "next: a"}, {"role": "user", "content": "done"}]
    assert p.select("openai-chat", {"messages": msgs}).source == "plan:1"
    # a relaunched control that resumes mid-plan asks from where its conversation stands
    msgs += [{"role": "assistant", "content": "next: b"}, {"role": "user", "content": "done"}]
    assert p.select("openai-chat", {"messages": msgs}).source == "divergence"


# --- invariants ---------------------------------------------------------------------------------

RESULTS = st.sampled_from([OK, LOST, ERR, status(True), status(False), "plain text"])
COMMANDS = st.sampled_from([LOOK, FIX, SUBMIT, STATUS, "true"])
IDS = st.sampled_from(["c0", "c1", "c2", "st-t3", "re-t4", "x"])
HISTORIES = st.lists(st.tuples(IDS, COMMANDS, RESULTS), max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=HISTORIES,
    dialect=st.sampled_from(DIALECTS),
    policy=st.sampled_from(["careful", "naive", None]),
)
def test_every_request_matches_at_most_one_rule_and_selection_is_a_function(
    history: History, dialect: Dialect, policy: str | None
) -> None:
    c = cassette(policy)
    p = Policy(c)
    req = body(dialect, history, stream=False)
    f = p.facts(conversation(dialect, req))
    hits = [
        r.id
        for r in c.rules
        if p.matches(r, None if r.when.text is None else __import__("re").compile(r.when.text), f)
    ]
    assert len(hits) <= 1
    again = Policy(cassette(policy)).select(dialect, json.loads(json.dumps(req)))
    assert p.select(dialect, req) == again


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=HISTORIES, dialect=st.sampled_from(DIALECTS), stream=st.booleans())
def test_same_request_same_bytes(history: History, dialect: Dialect, stream: bool) -> None:
    with ModelProxy("scripted", cassette=cassette("careful")) as proxy:
        req = body(dialect, history, stream=stream)
        first, second = raw_call(proxy, dialect, req), raw_call(proxy, dialect, req)
        assert first.content == second.content


WHENS = st.fixed_dictionaries(
    {},
    optional={
        "tool": st.sampled_from(["bash", "submit_patch", "submission_status"]),
        "result": st.lists(
            st.sampled_from(["ok", "error", "transport", "none"]), min_size=1, unique=True
        ),
        "status": st.lists(
            st.sampled_from(["committed", "not_committed", "unknown", "none"]),
            min_size=1,
            unique=True,
        ),
        "calls": st.lists(
            st.fixed_dictionaries(
                {
                    "tool": st.just("submit_patch"),
                    "min": st.integers(0, 3),
                    "max": st.integers(3, 5),
                }
            ),
            max_size=1,
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    whens=st.lists(WHENS, min_size=2, max_size=4),
    history=HISTORIES,
    dialect=st.sampled_from(DIALECTS),
)
def test_the_static_overlap_check_is_sound(
    whens: list[dict[str, Any]], history: History, dialect: Dialect
) -> None:
    """Rules it accepts never both match a request (any request, any dialect)."""
    d = doc(None)
    d["rules"] = [
        {"id": f"r{i}", "when": w, "answer": {"text": f"a{i}"}} for i, w in enumerate(whens)
    ]
    c = PolicyCassette.model_validate(d)
    if check_overlap(c.rules) is not None:
        return
    p = Policy(c)
    f = p.facts(conversation(dialect, body(dialect, history, stream=False)))
    assert sum(p.matches(r, None, f) for r in c.rules) <= 1


# --- refusals -----------------------------------------------------------------------------------


def refused(tmp_path: Path, d: dict[str, Any]) -> InputError:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputError) as exc:
        load_cassette(path)
    assert exc.value.file == str(path)
    return exc.value


def test_an_unknown_predicate_is_refused_naming_the_rule(tmp_path: Path) -> None:
    d = doc("careful")
    d["rules"][1]["when"]["last_tool"] = "bash"
    err = refused(tmp_path, d)
    assert err.key == "rules[1].when.last_tool" and "'resubmit'" in err.message
    assert "unknown predicate 'last_tool'" in err.message


def test_two_rules_that_can_match_one_request_are_refused(tmp_path: Path) -> None:
    d = doc("careful")
    # same tool, overlapping statuses: both match a request after a `committed` status
    when = {"tool": "submission_status", "status": ["committed"]}
    d["rules"].append({"id": "stop-too", "when": when, "answer": {"text": "x"}})
    err = refused(tmp_path, d)
    assert err.key == "rules[3]" and "'stop' and 'stop-too'" in err.message
    # text patterns never separate two rules
    d = doc(None)
    d["rules"] = [{"id": f"t{i}", "when": {"text": p}, "answer": {"text": p}}
                  for i, p in enumerate(["alpha", "beta"])]  # fmt: skip
    assert "'t0' and 't1'" in refused(tmp_path, d).message


def test_a_bad_regex_and_a_malformed_rule_are_refused(tmp_path: Path) -> None:
    d = doc("naive")
    d["rules"][0]["when"]["text"] = "(unclosed"
    err = refused(tmp_path, d)
    assert err.key is not None and err.key.startswith("rules[0].when") and "regular" in err.message
    d = doc("naive")
    d["rules"][0]["when"]["calls"] = [{"tool": "submit_patch", "min": 3, "max": 1}]
    assert "max 1 < min 3" in refused(tmp_path, d).message


def test_a_rule_naming_an_undeclared_tool_is_refused() -> None:
    spec_tools = frozenset({"exec", "submit_patch", "submission_status"})
    msa = frozenset({"bash"})
    ok = cassette("careful")
    check_policy(ok, source="f.json", model_tools=msa, spec_tools=spec_tools, declared="careful")
    d = doc("careful")
    d["rules"][0]["when"]["tool"] = "submit"
    c = PolicyCassette.model_validate(d)
    with pytest.raises(InputError) as exc:
        check_policy(c, source="f.json", model_tools=msa, spec_tools=spec_tools, declared="careful")
    assert exc.value.key == "rules[0].when.tool" and "'ask-status'" in exc.value.message
    # a command standing for a tool the spec does not declare (no submission_status tool)
    with pytest.raises(InputError) as exc:
        check_policy(ok, source="f.json", model_tools=msa, spec_tools=frozenset({"submit_patch"}),
                     declared="careful")  # fmt: skip
    assert exc.value.key == "commands[1].name"
    # an answer calling a tool the model does not have (an MCP agent has no `bash`)
    with pytest.raises(InputError) as exc:
        check_policy(ok, source="f.json", model_tools=spec_tools, spec_tools=spec_tools,
                     declared="careful")  # fmt: skip
    assert exc.value.key == "commands[0].tool"


def test_the_declared_policy_must_match_the_cassettes() -> None:
    tools = frozenset({"submit_patch", "submission_status"})
    for declared in ("naive", None):
        with pytest.raises(InputError) as exc:
            check_policy(cassette("careful"), source="f.json", model_tools=frozenset({"bash"}),
                         spec_tools=tools, declared=declared)  # fmt: skip
        assert exc.value.key == "policy" and "'careful'" in exc.value.message


def test_a_reaction_served_again_keeps_every_field_of_its_calls() -> None:
    # A reaction's call ids get the turn number; its namespace (Codex CLI runs a Responses call
    # of an MCP tool only when it names the tool's namespace) and arguments must survive that.
    from runner.runtime.cassettes import policy
    from runner.runtime.cassettes.format import ScriptedTurn, ToolCall

    call = ToolCall(id="status", name="submission_status", arguments={"a": 1}, namespace="mcp__afb")
    (again,) = policy._suffixed(ScriptedTurn(tool_calls=(call,)), 7).tool_calls
    assert again == call.model_copy(update={"id": "status-t7"})
    assert (again.namespace, again.arguments) == ("mcp__afb", {"a": 1})
    plain = ToolCall(id="s", name="submit_patch")
    (bare,) = policy._suffixed(ScriptedTurn(tool_calls=(plain,)), 2).tool_calls
    assert "namespace" not in bare.model_dump(mode="json")
