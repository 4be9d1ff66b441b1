"""Policy cassettes: a scripted model that reacts to what it is told (cassette kind `policy`).

A `scripted` cassette answers by turn number, so the script, not the agent, decides what happens
after a fault. A `policy` cassette chooses its answer by declared rules over the request, the way
a model reads its conversation. Format (JSON, `version` 1, `kind` "policy"):

    {"version": 1, "kind": "policy", "model": "afb-scripted",
     "policy": "careful" | "naive" | null,          # must equal the spec's model.policy
     "commands": [{"name": "submit_patch", "tool": "bash", "argument": "command",
                   "pattern": "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}, ...],
     "results": {"transport": "<regex>", "error": "<regex>"},
     "status_tool": "submission_status",
     "plan": [<turn>, ...],                         # the steps: look, copy, fix, test, submit
     "rules": [{"id": "...", "when": {<predicates>}, "answer": <turn>}, ...],
     "done": <turn> | null}

A turn is a scripted turn (`text`, `tool_calls` [{id, name, arguments}]). Per request:

1. The conversation is read from the request in its dialect (Chat Completions `messages`,
   Responses `input` items, Messages `messages`): every tool call the assistant made, every
   tool result bound to one (by call id), and the *last results*: those after the last
   assistant turn. The request must carry the whole conversation (a Responses request that
   continues a `previous_response_id` sees only its own items).
2. A tool call's *tool* is its name, unless a `commands` entry claims it: a call of
   `commands[i].tool` whose `argument` matches `pattern` (regex search; first entry in list
   order wins) is that entry's `name`. This is how a bash-only agent (mini-swe-agent: its one
   model tool is `bash`) names "the submit" and "the status query": by a command pattern. A
   command's `name` must be a tool the spec declares; its `tool` one the model has.
3. The last result is classified: `transport` if its text matches `results.transport`, else
   `error` if the result is flagged an error (Messages `is_error`) or its text matches
   `results.error`, else `ok`; `none` when the request carries no result after the last
   assistant turn (the first request; a user message).
4. The *status* is what the latest result of a `status_tool` call said: `committed` /
   `not_committed` (its text holds `"committed": true|false`, also JSON-escaped inside another
   JSON string, as mini-swe-agent's observation carries a command's output; read whatever the
   result's class, unless it is a transport failure), `unknown` (a transport failure, or the
   text says neither), `none` (never asked).
5. Rules: a rule matches when every predicate of its `when` holds:
   - `tool`: the tool the last result answers (after step 2);
   - `result`: list of classes (`ok`, `error`, `transport`, `none`) the last result is one of;
   - `text`: a regex found in the last result's text;
   - `calls`: list of {tool, min, max}: how often the assistant called that tool so far;
   - `status`: list of statuses (step 4) the latest status query said.
   No two rules may match one request; this is decided statically on load (`check_overlap`):
   two rules are disjoint only if one dimension separates them: different `tool`s, disjoint
   `result` or `status` sets, or disjoint `calls` intervals for a tool both constrain. `text`
   never separates two rules (regex intersection is not decided), so two rules that differ
   only by their text patterns are refused as overlapping.
6. The answer: the matching rule's `answer`; else the next plan step; else `done`; else a
   divergence (as a scripted turn beyond its script). The plan position is derived from the
   conversation, not from the turn count: it is one past the last plan step already issued (a
   step with tool calls is issued when one of its call ids is in the conversation; a text-only
   step when an assistant text equals it). Reaction turns therefore insert themselves without
   moving the plan. Rule and `done` answers get their tool call ids suffixed with `-t<N>` (N =
   assistant turns so far) so each stays unique in the conversation.

Everything is a pure function of the request body: the same request gives the same bytes, so a
relaunched agent that starts over gets the same answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pydantic import Field, ValidationError, model_validator

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import Frozen
from runner.runtime.cassettes.format import ScriptedTurn, where

ResultClass = Literal["ok", "error", "transport", "none"]
StatusClass = Literal["committed", "not_committed", "unknown", "none"]
PolicyName = Literal["careful", "naive"]
POLICIES: tuple[PolicyName, ...] = ("careful", "naive")
PREDICATES = ("tool", "result", "text", "calls", "status")
TOOL_CACHE = 4096  # memoized (tool name, JSON arguments) -> resolved tool, per loaded cassette
# `"committed": true`, also escaped inside a JSON string (`\"committed\": true`).
STATUS_RE = re.compile(r'"committed\\?"\s*:\s*(true|false)')


_META = frozenset(".^$*+?{}[]\\|()")


def searcher(pattern: str) -> Callable[[str], object]:
    """A test for `pattern` in a text, truthy as `re.search` is. A pattern that is only an
    alternation of plain literals (`a|b`, the usual `results.transport`) is tested with `in`:
    the same answer, but `re` tries every branch at every position (7 us over a 2 KB result,
    most of a policy answer's selection, against 1 us)."""
    lits = tuple(pattern.split("|"))
    if any(_META & set(x) for x in lits):
        return re.compile(pattern).search

    def found(text: str) -> bool:
        return any(map(text.__contains__, lits))

    return found


def _regex(pattern: str, what: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what}: not a regular expression: {exc}") from exc
    return pattern


class CommandAlias(Frozen):
    """A spec tool reached through one of the model's own tools by a command pattern."""

    name: str = Field(min_length=1, max_length=200, description="the spec tool it stands for")
    tool: str = Field(min_length=1, max_length=200, description="the model's tool carrying it")
    argument: str = Field(default="command", min_length=1, max_length=200)
    pattern: str = Field(min_length=1, max_length=2000, description="regex searched in argument")

    @model_validator(mode="after")
    def _compiles(self) -> CommandAlias:
        _regex(self.pattern, "pattern")
        return self


class ResultClasses(Frozen):
    transport: str | None = Field(default=None, description="regex: a transport failure")
    error: str | None = Field(default=None, description="regex: an error (after transport)")

    @model_validator(mode="after")
    def _compiles(self) -> ResultClasses:
        for name in ("transport", "error"):
            if (p := getattr(self, name)) is not None:
                _regex(p, name)
        return self


class CallCount(Frozen):
    tool: str = Field(min_length=1, max_length=200)
    min: int = Field(default=0, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> CallCount:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"calls of {self.tool!r}: max {self.max} < min {self.min}")
        return self


class When(Frozen):
    tool: str | None = Field(default=None, min_length=1, max_length=200)
    result: tuple[ResultClass, ...] | None = Field(default=None, min_length=1)
    text: str | None = Field(default=None, min_length=1, max_length=2000)
    calls: tuple[CallCount, ...] = ()
    status: tuple[StatusClass, ...] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _valid(self) -> When:
        if self.text is not None:
            _regex(self.text, "text")
        tools = [c.tool for c in self.calls]
        if len(set(tools)) != len(tools):
            raise ValueError("calls names a tool twice")
        return self


class Rule(Frozen):
    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    when: When
    answer: ScriptedTurn


class PolicyCassette(Frozen):
    """`kind = "policy"`: answers chosen by rules over the request (see the module docstring)."""

    version: Literal[1]
    kind: Literal["policy"]
    model: str = Field(default="afb-scripted", min_length=1)
    policy: PolicyName | None = Field(default=None, description="the spec's model.policy")
    commands: tuple[CommandAlias, ...] = ()
    results: ResultClasses = ResultClasses()
    status_tool: str = Field(default="submission_status", min_length=1, max_length=200)
    plan: tuple[ScriptedTurn, ...] = Field(min_length=1)
    rules: tuple[Rule, ...] = ()
    done: ScriptedTurn | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PolicyCassette:
        ids = [r.id for r in self.rules]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"rule ids used twice: {dup}")
        calls = [c.id for t in self.plan for c in t.tool_calls]
        dup = sorted({i for i in calls if calls.count(i) > 1})
        if dup:
            raise ValueError(f"plan tool call ids used twice: {dup}")
        texts = [t.text for t in self.plan if not t.tool_calls]
        if len(set(texts)) != len(texts):
            raise ValueError("two text-only plan steps say the same (the position reads them)")
        plan = set(calls) | set(texts)  # what the plan position is read from
        answers = [(f"rule {r.id!r}", r.answer) for r in self.rules]
        answers += [("done", self.done)] if self.done is not None else []
        for who, turn in answers:
            ans = [c.id for c in turn.tool_calls] if turn.tool_calls else [turn.text]
            if plan & set(ans):
                raise ValueError(f"{who} answers with a plan step's id or text")
        return self


def check_overlap(rules: Sequence[Rule]) -> tuple[str, str] | None:
    """The first pair of rules (by id) that can match one request, or None."""
    for i, a in enumerate(rules):
        for b in rules[i + 1 :]:
            if not _disjoint(a.when, b.when):
                return a.id, b.id
    return None


def _disjoint(a: When, b: When) -> bool:
    if a.tool is not None and b.tool is not None and a.tool != b.tool:
        return True
    for x, y in ((a.result, b.result), (a.status, b.status)):
        if x is not None and y is not None and not set(x) & set(y):
            return True
    bounds = {c.tool: c for c in b.calls}
    for c in a.calls:
        d = bounds.get(c.tool)
        if d is None:
            continue
        lo = max(c.min, d.min)
        hi = min(x for x in (c.max, d.max, 1 << 62) if x is not None)
        if lo > hi:
            return True
    return False


# ------------------------------------------------------------------------- the conversation


class Call(NamedTuple):  # tuples: built per message of every request, so cheap to make
    id: str
    name: str
    arguments: Any  # as the request carries them (a JSON string or an object): see `args`


# `tuple.__new__(Call, fields)`: the same tuple as `Call(*fields)` without the generated
# Python-level `__new__` (a third of the hot loop's time per message).
_new = tuple.__new__


class Result(NamedTuple):
    call_id: str
    text: str
    is_error: bool = False


@dataclass
class Conversation:
    """What a request tells the model: its calls, the results bound to them, the last results."""

    turns: int = 0
    texts: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    last: list[Result] = field(default_factory=list)

    def assistant(self, text: str, calls: Sequence[Call]) -> None:
        self.turns += 1
        if text:
            self.texts.append(text)
        self.calls.extend(calls)
        self.last = []

    def result(self, r: Result) -> None:
        self.results.append(r)
        self.last.append(r)


def _text(content: Any) -> str:
    """The text of a message content / tool output in any of the dialects' shapes."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
        return "".join(out)
    return "" if content is None else json.dumps(content, sort_keys=True)


def args(raw: Any) -> Mapping[str, Any]:
    """A call's arguments as an object (decoded only when a command pattern needs them)."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            v = json.loads(raw)
        except ValueError:
            return {}
        return v if isinstance(v, dict) else {}
    return {}


def conversation(dialect: str, body: Mapping[str, Any]) -> Conversation:
    conv = Conversation()
    if dialect == "openai-responses":
        items = body.get("input")
        in_run, text = False, ""
        calls: list[Call] = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            mine = item.get("role") == "assistant" or kind in (
                "function_call",
                "reasoning",
                "custom_tool_call",
            )
            if in_run and not mine:
                conv.assistant(text, calls)
                text, calls = "", []
            in_run = mine
            if item.get("role") == "assistant":
                text += _text(item.get("content"))
            elif kind in ("function_call", "custom_tool_call"):
                cid = item.get("call_id")
                raw = item.get("arguments", item.get("input"))
                calls.append(Call(str(cid), str(item.get("name", "")), raw))
            elif kind in ("function_call_output", "custom_tool_call_output"):
                conv.result(Result(str(item.get("call_id")), _text(item.get("output"))))
        if in_run:
            conv.assistant(text, calls)
        return conv
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return conv
    anthropic = dialect == "anthropic-messages"
    calls_out, results, texts = conv.calls, conv.results, conv.texts
    turns, start = 0, 0  # the last results: results[start:], those after the last assistant turn
    for m in msgs:  # the hot loop of a policy answer: kept flat (one pass, no helpers per item)
        if type(m) is not dict:
            continue
        role = m.get("role")
        if role == "assistant":
            turns += 1
            start = len(results)
            content = m.get("content")
            if anthropic and isinstance(content, list):
                text = ""
                for b in content:
                    if type(b) is dict:
                        kind = b.get("type")
                        if kind == "text":
                            text += str(b.get("text", ""))
                        elif kind == "tool_use":
                            call = (str(b.get("id")), str(b.get("name")), b.get("input"))
                            calls_out.append(_new(Call, call))
            else:
                text = content if isinstance(content, str) else _text(content)
                for c in m.get("tool_calls") or ():
                    fn = c.get("function") if type(c) is dict else None
                    if type(fn) is dict:
                        call = (str(c.get("id")), str(fn.get("name")), fn.get("arguments"))
                        calls_out.append(_new(Call, call))
            if text:
                texts.append(text)
        elif role == "tool":
            content = m.get("content")
            text = content if isinstance(content, str) else _text(content)
            results.append(_new(Result, (str(m.get("tool_call_id")), text, False)))
        elif role == "user" and anthropic:
            content = m.get("content")
            if isinstance(content, list):
                for b in content:
                    if type(b) is dict and b.get("type") == "tool_result":
                        err = b.get("is_error") is True
                        r = _new(Result, (str(b.get("tool_use_id")), _text(b.get("content")), err))
                        results.append(r)
    conv.turns, conv.last = turns, results[start:]
    return conv


# ----------------------------------------------------------------------------------- selection


class Selection(NamedTuple):
    """What answers a request: `source` is `rule:<id>`, `plan:<i>`, `done`, or `divergence`."""

    source: str
    answer: ScriptedTurn | None


class Policy:
    """A loaded policy cassette, its regexes compiled once: `select(dialect, body)`."""

    def __init__(self, cassette: PolicyCassette) -> None:
        self.c = cassette
        res = cassette.results
        self._aliases = [(a, searcher(a.pattern)) for a in cassette.commands]
        self._transport = searcher(res.transport) if res.transport else None
        self._error = searcher(res.error) if res.error else None
        self._texts = [(r, searcher(r.when.text) if r.when.text else None) for r in cassette.rules]
        self._tools: dict[tuple[str, str], str] = {}
        self._plan_ids: dict[str, int] = {}
        self._plan_texts: dict[str, int] = {}
        for i, t in enumerate(cassette.plan):
            if t.tool_calls:
                for c in t.tool_calls:
                    self._plan_ids[c.id] = i
            else:
                self._plan_texts[t.text] = i

    def tool_of(self, call: Call) -> str:
        """The call's tool after the command patterns; a pure function of (name, arguments),
        memoized for arguments sent as JSON text: a conversation re-sends every earlier call
        with each request, so only the newest is resolved afresh."""
        if not isinstance(call.arguments, str):
            return self._resolve(call)
        key = (call.name, call.arguments)
        tool = self._tools.get(key)
        if tool is None:
            if len(self._tools) >= TOOL_CACHE:
                self._tools.clear()
            tool = self._tools[key] = self._resolve(call)
        return tool

    def _resolve(self, call: Call) -> str:
        decoded: Mapping[str, Any] | None = None
        for alias, rx in self._aliases:
            if call.name == alias.tool:
                decoded = args(call.arguments) if decoded is None else decoded
                arg = decoded.get(alias.argument)
                if isinstance(arg, str) and rx(arg):
                    return alias.name
        return call.name

    def classify(self, r: Result | None) -> ResultClass:
        if r is None:
            return "none"
        if self._transport is not None and self._transport(r.text):
            return "transport"
        if r.is_error or (self._error is not None and self._error(r.text)):
            return "error"
        return "ok"

    def facts(self, conv: Conversation) -> Facts:
        tools: dict[str, str] = {}
        counts: dict[str, int] = {}
        memo, pos, plan_ids = self._tools, 0, self._plan_ids
        # per call of every request: `tool_of` and the plan step inlined, the tuples unpacked
        for call in conv.calls:
            cid, name, arguments = call
            tool = memo.get((name, arguments)) if type(arguments) is str else None
            if tool is None:
                tool = self.tool_of(call)
            tools[cid] = tool
            if (i := plan_ids.get(cid)) is not None and i >= pos:
                pos = i + 1
        for cid, _, _ in conv.calls:  # by id, as before: a call id sent twice counts its latest
            tool = tools[cid]
            counts[tool] = counts.get(tool, 0) + 1
        last = conv.last[-1] if conv.last else None
        status: StatusClass = "none"
        status_tool = self.c.status_tool
        for r in reversed(conv.results):
            if tools.get(r.call_id) == status_tool:
                # the answer's own flag, whatever the wrapper says (mini-swe-agent reports the
                # status tool's output with returncode -1: it has no exit code); no flag in a
                # transport failure or an error text: unknown
                m = STATUS_RE.search(r.text) if self.classify(r) != "transport" else None
                status = "unknown"
                if m is not None:
                    status = "committed" if m.group(1) == "true" else "not_committed"
                break
        for t in conv.texts:
            if (i := self._plan_texts.get(t)) is not None and i >= pos:
                pos = i + 1
        return Facts(
            tool=tools.get(last.call_id) if last is not None else None,
            result=self.classify(last),
            text=last.text if last is not None else None,
            counts=counts,
            status=status,
            position=pos,
            turns=conv.turns,
        )

    def matches(self, rule: Rule, rx: Callable[[str], object] | None, f: Facts) -> bool:
        w = rule.when
        if w.tool is not None and w.tool != f.tool:
            return False
        if w.result is not None and f.result not in w.result:
            return False
        if rx is not None and (f.text is None or not rx(f.text)):
            return False
        for cc in w.calls:
            n = f.counts.get(cc.tool, 0)
            if n < cc.min or (cc.max is not None and n > cc.max):
                return False
        return w.status is None or f.status in w.status

    def select(self, dialect: str, body: Mapping[str, Any]) -> Selection:
        f = self.facts(conversation(dialect, body))
        hits = [r for r, rx in self._texts if self.matches(r, rx, f)]
        if len(hits) > 1:  # the static check makes this unreachable; never pick silently
            raise AssertionError(f"rules {[r.id for r in hits]} all match one request")
        if hits:
            return Selection(f"rule:{hits[0].id}", _suffixed(hits[0].answer, f.turns))
        if f.position < len(self.c.plan):
            return Selection(f"plan:{f.position}", self.c.plan[f.position])
        if self.c.done is not None:
            return Selection("done", _suffixed(self.c.done, f.turns))
        return Selection("divergence", None)


def _suffixed(turn: ScriptedTurn, n: int) -> ScriptedTurn:
    """A reaction turn may be served more than once: its call ids get the turn number."""
    if not turn.tool_calls:
        return turn
    # a copy keeps every field of the call (a Responses `namespace` among them: Codex runs a
    # reaction's call only when it names its tool's namespace)
    calls = tuple(c.model_copy(update={"id": f"{c.id}-t{n}"}) for c in turn.tool_calls)
    return turn.model_copy(update={"tool_calls": calls})


class Facts(NamedTuple):  # per request: a tuple is cheaper to make than a frozen dataclass
    tool: str | None
    result: ResultClass
    text: str | None
    counts: Mapping[str, int]
    status: StatusClass
    position: int
    turns: int


# ------------------------------------------------------------------------ checks against a spec


def check_policy(
    cassette: PolicyCassette,
    *,
    source: str,
    model_tools: frozenset[str] | None,
    spec_tools: frozenset[str],
    declared: PolicyName | None,
) -> None:
    """Refuse (InputError naming `source` and the rule) what the spec cannot serve.

    `model_tools` are the tools the subject's model is given (mini-swe-agent: `bash`; a
    `command:` agent: the spec's tools; the planning control: none); None skips the tool check.
    """
    if cassette.policy != declared:
        raise InputError(
            f"the cassette declares policy {cassette.policy!r}, the spec's model.policy is "
            f"{declared!r}",
            file=source,
            key="policy",
        )
    if model_tools is None:
        return
    for i, a in enumerate(cassette.commands):
        if a.name not in spec_tools:
            raise InputError(
                f"command {a.name!r} names a tool the spec does not declare "
                f"(declared: {sorted(spec_tools)})",
                file=source,
                key=f"commands[{i}].name",
            )
        if a.tool not in model_tools:
            raise InputError(
                f"command {a.name!r} is carried by {a.tool!r}, not a tool of this subject's "
                f"model ({sorted(model_tools)})",
                file=source,
                key=f"commands[{i}].tool",
            )
    known = model_tools | {a.name for a in cassette.commands}
    for i, r in enumerate(cassette.rules):
        names = [(r.when.tool, f"rules[{i}].when.tool")] if r.when.tool is not None else []
        names += [
            (cc.tool, f"rules[{i}].when.calls[{j}].tool") for j, cc in enumerate(r.when.calls)
        ]
        if r.when.status is not None:
            names.append((cassette.status_tool, "status_tool"))
        for name, key in names:
            if name not in known:
                raise InputError(
                    f"rule {r.id!r} names tool {name!r}, which neither the spec (through "
                    f"`commands`) nor this subject's model declares (known: {sorted(known)})",
                    file=source,
                    key=key,
                )
    answers = [(t, f"plan[{i}]") for i, t in enumerate(cassette.plan)]
    answers += [(r.answer, f"rules[{i}].answer") for i, r in enumerate(cassette.rules)]
    answers += [(cassette.done, "done")] if cassette.done is not None else []
    for turn, key in answers:
        for j, c in enumerate(turn.tool_calls):
            if c.name not in model_tools:
                raise InputError(
                    f"calls {c.name!r}, not a tool of this subject's model ({sorted(model_tools)})",
                    file=source,
                    key=f"{key}.tool_calls[{j}].name",
                )


def parse_policy(raw: Mapping[str, Any], source: str) -> PolicyCassette:
    """Validate a policy cassette's JSON; every refusal names `source` and the rule."""
    rules = raw.get("rules")
    for i, r in enumerate(rules if isinstance(rules, list) else []):
        when = r.get("when") if isinstance(r, dict) else None
        if isinstance(when, dict):
            rid = r.get("id")
            for name in when:
                if name not in PREDICATES:
                    raise InputError(
                        f"rule {rid!r}: unknown predicate {name!r}; predicates: {list(PREDICATES)}",
                        file=source,
                        key=f"rules[{i}].when.{name}",
                    )
    try:
        cassette = PolicyCassette.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(f"{err['msg']}{more}", file=source, key=where(err["loc"])) from exc
    pair = check_overlap(cassette.rules)
    if pair is not None:
        ids = [r.id for r in cassette.rules]
        raise InputError(
            f"rules {pair[0]!r} and {pair[1]!r} can match the same request: no predicate "
            "separates them (different `tool`s, disjoint `result`/`status` sets or disjoint "
            "`calls` bounds; a `text` pattern never does)",
            file=source,
            key=f"rules[{ids.index(pair[1])}]",
        )
    return cassette
