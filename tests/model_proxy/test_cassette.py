"""The cassette format: loading, the errors a user sees, content addresses, normalization."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.errors import InputError
from runner.runtime.cassettes.format import (
    VOLATILE_FIELDS,
    Cassette,
    RecordedExchange,
    RecordedResponse,
    normalize_request,
    request_key,
)
from runner.runtime.cassettes.load import (
    cassette_bytes,
    cassette_digest,
    load_cassette,
    parse_cassette,
)
from tests.model_proxy.conftest import SCRIPT


def recorded(n: int = 2) -> dict[str, Any]:
    req = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    key = request_key("openai-chat", req)
    entries = [
        {
            "key": key,
            "occurrence": i + 1,
            "dialect": "openai-chat",
            "request": dict(req),
            "response": {"status": 200, "content_type": "application/json", "body": "{}"},
        }
        for i in range(n)
    ]
    return {"version": 1, "kind": "recorded", "recorded": entries}


def write(tmp_path: Path, doc: Any) -> Path:
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def test_valid_cassettes_load_and_digest_is_sha256_of_canonical_bytes(tmp_path: Path) -> None:
    c = load_cassette(write(tmp_path, recorded()))
    assert c.lookup(c.recorded[0].key, 2) is c.recorded[1]
    assert c.lookup(c.recorded[0].key, 3) is None  # strict by default
    expected = "sha256:" + hashlib.sha256(cassette_bytes(c)).hexdigest()
    assert cassette_digest(c) == expected
    s = load_cassette(write(tmp_path, SCRIPT.model_dump(mode="json")))
    assert s == SCRIPT and cassette_digest(s) == cassette_digest(SCRIPT)
    assert cassette_digest(s) != cassette_digest(c)


def test_reuse_last_serves_the_last_occurrence_again() -> None:
    c = Cassette.model_validate({**recorded(), "on_repeat": "reuse_last"})
    assert c.lookup(c.recorded[0].key, 7) is c.recorded[1]
    assert c.lookup("sha256:" + "0" * 64, 1) is None  # an unknown request is still a miss


@pytest.mark.parametrize(
    ("doc", "key", "words"),
    [
        ("{not json", None, "not a JSON cassette"),
        ("[1, 2]", None, "a cassette is a JSON object"),
        ({**recorded(), "version": 2}, "version", "unknown cassette version 2; expected 1"),
        ({**recorded(), "version": "1"}, "version", "unknown cassette version '1'"),
        ({"kind": "scripted"}, "version", "unknown cassette version None"),
        ({**recorded(), "extra": 1}, "extra", "Extra inputs are not permitted"),
        ({"version": 1, "kind": "scripted", "turns": [{}]}, "turns[0]", "text or tool_calls"),
        ({"version": 1, "kind": "scripted"}, "(top level)", "at least one turn"),
        ({"version": 1, "kind": "taped"}, "kind", "'recorded' or 'scripted'"),
    ],
)
def test_malformed_cassettes_are_input_errors_naming_file_and_entry(
    tmp_path: Path, doc: Any, key: str | None, words: str
) -> None:
    p = write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_cassette(p)
    assert err.value.file == str(p)
    assert err.value.key == key
    assert words in err.value.message
    assert str(p) in str(err.value)


def test_errors_name_the_recorded_entry(tmp_path: Path) -> None:
    doc = recorded(3)
    doc["recorded"][2]["response"]["status"] = 42
    with pytest.raises(InputError) as err:
        load_cassette(write(tmp_path, doc))
    assert err.value.key == "recorded[2].response.status"
    doc = recorded(2)
    doc["recorded"][1]["request"]["model"] = "edited"  # the key no longer addresses it
    with pytest.raises(InputError) as err:
        load_cassette(write(tmp_path, doc))
    assert err.value.key == "recorded[1]" and "content address" in err.value.message
    doc = recorded(2)
    doc["recorded"][1]["occurrence"] = 3
    with pytest.raises(InputError, match=r"recorded\[1\]: occurrence 3 .* expected 2"):
        load_cassette(write(tmp_path, doc))
    doc = recorded(1)
    doc["recorded"][0]["request"]["metadata"] = {"user_id": "u"}
    with pytest.raises(InputError, match="volatile"):
        load_cassette(write(tmp_path, doc))


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_cassette(tmp_path / "nope.json")
    assert err.value.file == str(tmp_path / "nope.json")


def test_base64_bodies_round_trip_and_bad_base64_is_refused() -> None:
    r = RecordedResponse(status=200, content_type="x", body="AAEC/w==", body_encoding="base64")
    assert r.body_bytes() == b"\x00\x01\x02\xff"
    with pytest.raises(ValueError, match="base64"):
        RecordedResponse(status=200, content_type="x", body="!!", body_encoding="base64")


json_scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k not in VOLATILE_FIELDS),
    json_values,
    max_size=5,
)


@settings(max_examples=80, deadline=None)
@given(bodies, st.dictionaries(st.sampled_from(VOLATILE_FIELDS), json_values), st.randoms())
def test_key_ignores_volatile_fields_and_member_order(
    body: dict[str, Any], volatile: dict[str, Any], rnd: Any
) -> None:
    items = list({**body, **volatile}.items())
    rnd.shuffle(items)
    noisy = dict(items)
    assert normalize_request(noisy) == body
    assert request_key("openai-chat", normalize_request(noisy)) == request_key("openai-chat", body)
    # ... but the dialect and every other field are part of the address
    assert request_key("anthropic-messages", body) != request_key("openai-chat", body)
    changed = {**body, "afb-extra-field": 1}
    assert request_key("openai-chat", changed) != request_key("openai-chat", body)


@settings(max_examples=40, deadline=None)
@given(st.lists(bodies, min_size=1, max_size=4), st.sampled_from(["divergence", "reuse_last"]))
def test_recorded_cassettes_round_trip_through_their_canonical_bytes(
    reqs: list[dict[str, Any]], on_repeat: str
) -> None:
    entries, seen = [], {}
    for r in reqs:
        key = request_key("openai-responses", r)
        seen[key] = seen.get(key, 0) + 1
        resp = RecordedResponse(status=200, content_type="application/json", body=json.dumps(r))
        entries.append(
            RecordedExchange(
                key=key, occurrence=seen[key], dialect="openai-responses", request=r, response=resp
            )
        )
    c = Cassette(version=1, kind="recorded", on_repeat=on_repeat, recorded=tuple(entries))  # type: ignore[arg-type]
    again = parse_cassette(cassette_bytes(c), "mem")
    assert again == c and cassette_digest(again) == cassette_digest(c)
