"""The four "HTTP 200 that lied" cases, served by a real local HTTP server, each with its control.

In every case the source contract matches exactly (provider, endpoint, field path, parser); only
the payload is wrong, and the shape check must say so with its own reason code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evaluator.environment.artifact import policy_of
from runner.evaluator.environment.conformance import check_run
from runner.evaluator.evidence.shape import ResponseSnapshot, ShapeVerdict, check_shape, read_value
from runner.evaluator.protocol.spec import ShapeCheck, SourceContract
from runner.evaluator.protocol.specload import load_spec
from runner.runtime.envcollect import observe, read_http, read_source
from tests.environment.conftest import LyingServer

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "environment"
SPEC = load_spec(VECTORS / "spec.toml")
POLICY = policy_of(SPEC.factors, SPEC.sources)
FOLLOWERS = POLICY.source("people-followers")

POSTS = SourceContract(
    id="forum-posts",
    provider="http",
    endpoint="/api/posts?submolt=cats",
    field_path="$.posts",
    parser="json@1",
    normalizer="identity@1",
    shape=ShapeCheck(
        status=200,
        content_type="application/json",
        parse="json",
        json_schema={
            "type": "object",
            "required": ["success", "posts"],
            "properties": {"success": {"const": True}, "posts": {"type": "array"}},
        },
        scope_param="submolt",
        scope_echo_path="$.submolt",
        items_path="$.posts",
        item_scope_field="submolt",
        max_items=50,
        non_empty=True,
    ),
)

MESSAGES = SourceContract(
    id="messages",
    provider="http",
    endpoint="/v1/messages",
    field_path="$.content[0].text",
    parser="text@1",
    normalizer="identity@1",
    shape=ShapeCheck(
        status=200,
        content_type="application/json",
        parse="json",
        json_schema={"type": "object", "required": ["content"]},
        items_path="$.content",
        non_empty=True,
    ),
)


def _read(server: LyingServer, contract: SourceContract) -> tuple[ResponseSnapshot, ShapeVerdict]:
    snap = read_source(contract, http_base=server.base)
    return snap, read_value(snap, contract)


# --------------------------------------------------------------------- 1. HTML inside a JSON 200


def test_html_error_page_in_json_200(lying_server: LyingServer) -> None:
    lying_server.mode["/api/people/42"] = "ok"
    snap, control = _read(lying_server, FOLLOWERS)
    assert control.ok and control.value == 1449

    lying_server.mode["/api/people/42"] = "html_in_json"
    snap, v = _read(lying_server, FOLLOWERS)
    assert snap.status == 200 and snap.content_type == "application/json"  # it claims JSON
    assert not v.ok
    assert v.reason_codes == ("body_not_parseable",)
    assert v.value is None


# ------------------------------------------------------------ 2. a redirect to a login page, 200


def test_redirect_to_login_page_ending_in_200(lying_server: LyingServer) -> None:
    lying_server.mode["/api/people/42"] = "ok"
    snap, control = _read(lying_server, FOLLOWERS)
    assert control.ok and not snap.redirects

    lying_server.mode["/api/people/42"] = "login_redirect"
    snap, v = _read(lying_server, FOLLOWERS)
    assert snap.status == 200  # the client saw a 200 in the end
    assert [h.status for h in snap.redirects] == [302]
    assert snap.final_url and "/login" in snap.final_url
    assert not v.ok
    assert v.reason_codes[0] == "redirected"


def test_redirect_is_caught_even_when_the_login_page_looks_right(
    lying_server: LyingServer,
) -> None:
    # The login endpoint answers JSON that passes every other check: only the redirect indicts it.
    lying_server.mode["/api/people/42"] = "login_redirect_json"
    snap, v = _read(lying_server, FOLLOWERS)
    assert snap.status == 200 and (snap.content_type or "").startswith("application/json")
    assert v.reason_codes == ("redirected",)


# ---------------------------------------------------------------- 3. a scope filter ignored


def test_scope_filter_silently_ignored(lying_server: LyingServer) -> None:
    lying_server.mode["/api/posts"] = "ok"
    snap, control = _read(lying_server, POSTS)
    assert snap.requested_scope == "cats"
    assert control.ok, control.details
    assert len(control.value) == 3

    # {"success": true} with site-wide data and no echo of the forum asked for.
    lying_server.mode["/api/posts"] = "filter_ignored"
    _, v = _read(lying_server, POSTS)
    assert not v.ok
    assert set(v.reason_codes) == {"scope_not_echoed", "item_out_of_scope"}

    # Echoes the scope, but the items are from everywhere: the items indict it.
    lying_server.mode["/api/posts"] = "filter_ignored_echoed"
    _, v = _read(lying_server, POSTS)
    assert v.reason_codes == ("item_out_of_scope",)


def test_scope_answer_larger_than_the_scope_can_hold(lying_server: LyingServer) -> None:
    lying_server.mode["/api/posts"] = "too_many"
    _, v = _read(lying_server, POSTS)
    assert v.reason_codes == ("too_many_items",)


# ------------------------------------------------------------ 4. 200 with zero content items


def test_200_with_zero_items_where_one_must_exist(lying_server: LyingServer) -> None:
    lying_server.mode["/v1/messages"] = "ok"
    _, control = _read(lying_server, MESSAGES)
    assert control.ok and control.value == "done"

    lying_server.mode["/v1/messages"] = "empty"
    _, v = _read(lying_server, MESSAGES)
    assert v.reason_codes[0] == "empty_where_nonempty_required"
    assert v.value is None


def test_the_four_lies_have_distinct_reason_codes(lying_server: LyingServer) -> None:
    primary = {}
    for contract, path, mode in [
        (FOLLOWERS, "/api/people/42", "html_in_json"),
        (FOLLOWERS, "/api/people/42", "login_redirect"),
        (POSTS, "/api/posts", "filter_ignored_echoed"),
        (MESSAGES, "/v1/messages", "empty"),
    ]:
        lying_server.mode[path] = mode
        _, v = _read(lying_server, contract)
        assert not v.ok
        primary[mode] = v.reason_codes[0]
    assert len(set(primary.values())) == 4, primary


# ----------------------------------------------------- end to end: a lie is evidence failure


@pytest.mark.parametrize("mode", ["html_in_json", "login_redirect"])
def test_a_lying_source_fails_the_run_closed(lying_server: LyingServer, mode: str) -> None:
    lying_server.mode["/api/people/42"] = "ok"
    good = observe(POLICY, http_base=lying_server.base, only=["followers"])
    f = good.observation("followers")
    assert f is not None and f.shape.ok and f.raw_value == 1449

    lying_server.mode["/api/people/42"] = mode
    bad = observe(POLICY, http_base=lying_server.base, only=["followers"])
    f = bad.observation("followers")
    assert f is not None and not f.shape.ok
    assert f.raw_value is None and f.normalized_value is None  # never a value
    proof = check_run(bad, [x for x in POLICY.factors if x.id == "followers"], POLICY.sources)
    assert proof.decision == "refused"
    assert proof.reason_codes == ("shape_failed",)


def test_connection_refused_is_a_failed_read() -> None:
    snap = read_http("http://127.0.0.1:9/api/people/42", timeout=2)
    assert snap.error is not None
    assert check_shape(snap, FOLLOWERS.shape).reason_codes == ("read_failed",)


def test_non_2xx_is_a_status_mismatch(lying_server: LyingServer) -> None:
    snap = read_http(lying_server.url("/nope"))
    assert snap.status == 404
    assert "status_mismatch" in check_shape(snap, FOLLOWERS.shape).reason_codes
