"""Every mode and dialect, streaming and not, through the real `openai` and `anthropic` SDKs
and raw HTTP, against the real proxy (front + backend) and a real local upstream."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import anthropic
import openai
import pytest

from runner.evaluator.core.errors import InputError
from runner.runtime.cassettes.format import Dialect
from runner.runtime.cassettes.load import cassette_bytes, load_cassette
from runner.runtime.interposers.modelproxy import DUMMY_KEY, ModelProxy, Upstream
from tests.model_proxy.conftest import (
    DIALECTS,
    KEY_ENV,
    SCRIPT,
    UPSTREAM_KEY,
    FakeUpstream,
    conversation,
    raw_call,
    sdk_call,
)

MODES = [(d, s) for d in DIALECTS for s in (False, True)]
EXPECTED_SCRIPT = [
    "Let me look.|bash{}",
    '|bash{"cmd":"ls -la"}|submit{"ok":true}',
    "All done.",
]


def _anthropic_form(text: str) -> str:
    # The Anthropic SDK parses tool input to a dict; the OpenAI ones keep the JSON string.
    return text.replace('bash{"cmd":"ls -la"}', "bash{'cmd': 'ls -la'}").replace(
        'submit{"ok":true}', "submit{'ok': True}"
    )


@pytest.mark.parametrize(("dialect", "stream"), MODES)
def test_scripted_answers_by_turn_and_a_relaunch_gets_the_same(
    dialect: Dialect, stream: bool
) -> None:
    with ModelProxy("scripted", cassette=SCRIPT) as proxy:
        got = [sdk_call(proxy, dialect, conversation(dialect, n, stream=stream)) for n in range(3)]
        want = EXPECTED_SCRIPT
        if dialect == "anthropic-messages":
            want = [_anthropic_form(w).removeprefix("|") for w in want]
        assert got == want
        # a relaunched agent starts over: same conversation, byte-identical answers
        first = [raw_call(proxy, dialect, conversation(dialect, n, stream=stream)) for n in (0, 1)]
        again = [raw_call(proxy, dialect, conversation(dialect, n, stream=stream)) for n in (0, 1)]
        assert [r.content for r in first] == [r.content for r in again]
        assert (
            first[0]
            .headers["content-type"]
            .startswith("text/event-stream" if stream else "application/json")
        )
        assert proxy.divergences() == []
        ledger = proxy.ledger()
        assert len(ledger) == 7 and {i["source"] for i in ledger} == {"script"}
        assert [i["turn"] for i in ledger[:3]] == [0, 1, 2]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_turn_beyond_the_script_is_a_divergence_and_is_not_retried(dialect: Dialect) -> None:
    got: list[object] = []
    with ModelProxy("scripted", cassette=SCRIPT, on_event=got.append) as proxy:
        body = conversation(dialect, 3, stream=False)
        urls = proxy.base_urls()
        with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as err:
            if dialect == "anthropic-messages":
                ac = anthropic.Anthropic(base_url=urls["ANTHROPIC_BASE_URL"], api_key="d")
                ac.messages.create(**{k: v for k, v in body.items() if k != "stream"})
            elif dialect == "openai-chat":
                oc = openai.OpenAI(base_url=urls["OPENAI_BASE_URL"], api_key="d")  # 2 retries
                oc.chat.completions.create(**{k: v for k, v in body.items() if k != "stream"})
            else:
                oc = openai.OpenAI(base_url=urls["OPENAI_BASE_URL"], api_key="d")
                oc.responses.create(**{k: v for k, v in body.items() if k != "stream"})
        assert err.value.status_code == 422
        assert "beyond the script" in str(err.value)
        divs = proxy.divergences()
        assert len(divs) == 1 and got == divs  # the SDK's default retries were told not to
        d = divs[0]
        assert (d.kind, d.dialect, d.turn, d.status) == ("divergence", dialect, 3, 422)
        assert d.call_id.startswith("m") and d.key.startswith("sha256:")
        assert proxy.ledger() == []  # no answer was produced


@pytest.mark.parametrize(("dialect", "stream"), MODES)
def test_live_forwards_with_the_host_key_and_drops_the_subjects(
    upstream: FakeUpstream, host_env: dict[str, str], dialect: Dialect, stream: bool
) -> None:
    with ModelProxy("live", upstreams=upstream.upstreams(), environ=host_env) as proxy:
        assert sdk_call(proxy, dialect, conversation(dialect, 0, stream=stream)) == (
            "upstream answer 1"
        )
        assert proxy.recorded_cassette() is None and proxy.events() == []
        assert proxy.ledger()[0]["source"] == "upstream"
    (h,) = upstream.seen_headers
    cred = h.get("x-api-key") if dialect == "anthropic-messages" else h.get("authorization")
    assert cred is not None and UPSTREAM_KEY in cred
    assert not any("dummy-subject-key" in v for v in h.values())
    other = "authorization" if dialect == "anthropic-messages" else "x-api-key"
    assert other not in h  # the subject's credential for the other provider is not forwarded


def _record_all(proxy: ModelProxy) -> dict[tuple[Dialect, bool, int], bytes]:
    """Every dialect x stream, the same request twice; the raw bytes the subject got."""
    out = {}
    for dialect, stream in MODES:
        for rep in (1, 2):
            r = raw_call(proxy, dialect, conversation(dialect, 0, stream=stream))
            assert r.status_code == 200, r.text
            out[(dialect, stream, rep)] = r.content
    return out


def test_record_then_replay_is_byte_identical(
    upstream: FakeUpstream, host_env: dict[str, str], tmp_path: Path
) -> None:
    with ModelProxy("record", upstreams=upstream.upstreams(), environ=host_env) as rec:
        live = _record_all(rec)
        # the SDKs parse what the real upstream sent, in every dialect, streamed or not
        for dialect, stream in MODES:
            got = sdk_call(rec, dialect, conversation(dialect, 0, stream=stream, note="sdk"))
            assert got.startswith("upstream answer ")
        cassette = rec.recorded_cassette()
    assert cassette is not None and len(cassette.recorded) == 18
    assert {e.occurrence for e in cassette.recorded} == {1, 2}
    path = tmp_path / "cassette.json"
    path.write_bytes(cassette_bytes(cassette))
    loaded = load_cassette(path)
    assert loaded == cassette
    n_upstream = upstream.count
    with ModelProxy("replay", cassette=loaded) as rep:
        replayed = _record_all(rep)
        for dialect, stream in MODES:
            got = sdk_call(rep, dialect, conversation(dialect, 0, stream=stream, note="sdk"))
            assert got.startswith("upstream answer ")
        assert rep.divergences() == []
    assert replayed == live  # byte for byte, occurrence by occurrence
    assert live[("openai-chat", False, 1)] != live[("openai-chat", False, 2)]
    assert upstream.count == n_upstream  # replay never reached the upstream


def test_replay_miss_is_a_divergence_record(
    upstream: FakeUpstream, host_env: dict[str, str]
) -> None:
    with ModelProxy("record", upstreams=upstream.upstreams(), environ=host_env) as rec:
        raw_call(rec, "openai-chat", conversation("openai-chat", 0, stream=False))
        cassette = rec.recorded_cassette()
    assert cassette is not None
    events: list[object] = []
    with ModelProxy("replay", cassette=cassette, on_event=events.append) as rep:
        hit = raw_call(rep, "openai-chat", conversation("openai-chat", 0, stream=False))
        again = raw_call(rep, "openai-chat", conversation("openai-chat", 0, stream=False))
        other = raw_call(rep, "openai-chat", conversation("openai-chat", 0, stream=True))
        assert hit.status_code == 200
        assert again.status_code == other.status_code == 422
        assert again.headers["x-should-retry"] == "false"
        assert again.json()["error"]["type"] == "afb_divergence"
        divs = rep.divergences()
        assert events == divs and [d.occurrence for d in divs] == [2, 1]
        assert divs[0].key == cassette.recorded[0].key  # the same request, seen once too often
        assert divs[1].key != cassette.recorded[0].key  # `stream` is part of the address
    # with on_repeat = reuse_last the repeat is served instead
    lenient = cassette.model_copy(update={"on_repeat": "reuse_last"})
    with ModelProxy("replay", cassette=lenient) as rep:
        first = raw_call(rep, "openai-chat", conversation("openai-chat", 0, stream=False))
        second = raw_call(rep, "openai-chat", conversation("openai-chat", 0, stream=False))
        assert first.content == second.content == hit.content
        assert rep.divergences() == []


def test_volatile_fields_do_not_change_the_address(
    upstream: FakeUpstream, host_env: dict[str, str]
) -> None:
    body = conversation("anthropic-messages", 1, stream=True)
    with ModelProxy("record", upstreams=upstream.upstreams(), environ=host_env) as rec:
        raw_call(rec, "anthropic-messages", {**body, "metadata": {"user_id": "session-1"}})
        cassette = rec.recorded_cassette()
    assert cassette is not None and "session-1" not in cassette_bytes(cassette).decode()
    with ModelProxy("replay", cassette=cassette) as rep:
        r = raw_call(rep, "anthropic-messages", {**body, "metadata": {"user_id": "session-2"}})
        assert r.status_code == 200 and rep.divergences() == []


def test_the_upstream_key_never_reaches_the_cassette_the_evidence_or_the_subject(
    upstream: FakeUpstream, host_env: dict[str, str]
) -> None:
    seen: list[object] = []
    with ModelProxy(
        "record", upstreams=upstream.upstreams(), environ=host_env, on_event=seen.append
    ) as rec:
        subject_bytes = b""
        for dialect, stream in MODES:
            body = conversation(dialect, 0, stream=stream, note="please ECHO-KEY")
            subject_bytes += raw_call(rec, dialect, body).content
        upstream.fail_with = 500
        subject_bytes += raw_call(
            rec, "openai-chat", conversation("openai-chat", 0, stream=False)
        ).content
        cassette = rec.recorded_cassette()
        evidence = [
            cassette_bytes(cassette) if cassette else b"",
            json.dumps([e.to_dict() for e in rec.events()]).encode(),
            json.dumps(rec.ledger()).encode(),
            json.dumps([c.to_dict() for c in rec.front.connections()]).encode(),
            b"".join(ex.request_body for c in rec.front.connections() for ex in c.exchanges),
            repr(rec.__dict__).encode(),
            repr(rec.state.forwarder.upstreams if rec.state.forwarder else None).encode(),
        ]
    # the search is meaningful: the upstream did get the key, and did echo it back
    assert any(UPSTREAM_KEY in v for h in upstream.seen_headers for v in h.values())
    assert b"[redacted]" in subject_bytes and b"(you sent [redacted])" in cassette_bytes(cassette)
    for blob in [subject_bytes, *evidence]:
        assert UPSTREAM_KEY.encode() not in blob
    assert len(seen) == 1  # the upstream 500, reported as such


def test_live_mode_without_a_key_is_an_input_error(upstream: FakeUpstream) -> None:
    for env in ({}, {KEY_ENV: ""}):
        with pytest.raises(InputError) as err:
            ModelProxy("live", upstreams=upstream.upstreams(), environ=env)
        assert err.value.key == KEY_ENV and "unset or empty" in err.value.message
    with pytest.raises(InputError, match="at least one upstream"):
        ModelProxy("record", upstreams={}, environ={KEY_ENV: "k"})
    bad = {"openai": Upstream("openai", "ftp://x", KEY_ENV)}
    with pytest.raises(InputError, match="http"):
        ModelProxy("live", upstreams=bad, environ={KEY_ENV: "k"})


def test_mode_and_cassette_must_fit() -> None:
    with pytest.raises(InputError, match="replay mode needs a recorded cassette"):
        ModelProxy("replay", cassette=SCRIPT)
    with pytest.raises(InputError, match="scripted mode needs a scripted cassette, got none"):
        ModelProxy("scripted")
    with pytest.raises(InputError, match="unknown model proxy mode"):
        ModelProxy("tape")  # type: ignore[arg-type]


def test_upstream_failures_are_reported_as_upstream_not_as_the_agent(
    upstream: FakeUpstream, host_env: dict[str, str]
) -> None:
    events: list[object] = []
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    ups = {"openai": Upstream("openai", f"http://127.0.0.1:{dead}/v1", KEY_ENV)}
    with ModelProxy("live", upstreams=ups, environ=host_env, on_event=events.append) as p:
        r = raw_call(p, "openai-chat", conversation("openai-chat", 0, stream=False))
        assert r.status_code == 502 and r.json()["error"]["type"] == "afb_upstream_error"
        r = raw_call(p, "anthropic-messages", conversation("anthropic-messages", 0, stream=False))
        assert r.status_code == 502  # no anthropic upstream configured
    assert [e.kind for e in events] == ["upstream_error", "upstream_error"]  # type: ignore[attr-defined]
    upstream.fail_with = 503
    events.clear()
    with ModelProxy(
        "live", upstreams=upstream.upstreams(), environ=host_env, on_event=events.append
    ) as p:
        r = raw_call(p, "openai-responses", conversation("openai-responses", 0, stream=False))
        assert r.status_code == 503  # passed through, as the agent would see it from the API
        assert p.ledger() == []  # no answer produced
    (ev,) = events
    assert dataclasses.asdict(ev)["status"] == 503 and "upstream HTTP 503" in ev.message  # type: ignore[attr-defined]


def test_subject_env_gives_base_urls_and_only_a_dummy_key() -> None:
    with ModelProxy("scripted", cassette=SCRIPT, host="127.0.0.1") as p:
        host, port = p.address
        env = p.subject_env()
    assert env["OPENAI_BASE_URL"] == f"http://{host}:{port}/v1"
    assert env["ANTHROPIC_BASE_URL"] == f"http://{host}:{port}"
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == DUMMY_KEY
