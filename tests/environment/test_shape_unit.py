"""Pure shape checks: each failure has its own reason code and never carries a value."""

from __future__ import annotations

from typing import Any

import pytest

from runner.evaluator.evidence.shape import (
    SHAPE_REASON_CODES,
    RedirectHop,
    ResponseSnapshot,
    check_shape,
    get_path,
    is_missing,
    read_value,
)
from runner.evaluator.protocol.spec import ShapeCheck, SourceContract

JSON = "application/json"
GOOD = b'{"scope": "a", "items": [{"s": "a", "v": 1}], "n": 3}'


def snap(**kw: Any) -> ResponseSnapshot:
    base: dict[str, Any] = {"status": 200, "content_type": JSON, "body": GOOD}
    base.update(kw)
    return ResponseSnapshot(**base)


def chk(**kw: Any) -> ShapeCheck:
    base: dict[str, Any] = {"status": 200, "content_type": JSON, "parse": "json"}
    base.update(kw)
    return ShapeCheck(**base)


CASES: list[tuple[str, ResponseSnapshot, ShapeCheck, str, str]] = [
    ("status", snap(status=500), chk(), "$", "status_mismatch"),
    ("content-type", snap(content_type="text/html"), chk(), "$", "content_type_mismatch"),
    ("html", snap(body=b"<html>oops</html>"), chk(), "$", "body_not_parseable"),
    ("not-utf8", snap(body=b"\xff\xfe"), chk(), "$", "body_not_parseable"),
    ("dup-keys", snap(body=b'{"a":1,"a":2}'), chk(), "$", "body_not_parseable"),
    (
        "redirect",
        snap(redirects=(RedirectHop(status=302, location="/login"),)),
        chk(),
        "$",
        "redirected",
    ),
    (
        "final-url",
        snap(requested_url="http://h/x", final_url="http://h/login"),
        chk(),
        "$",
        "redirected",
    ),
    ("schema", snap(), chk(json_schema={"required": ["missing"]}), "$", "schema_invalid"),
    ("too-large", snap(), chk(max_bytes=10), "$", "too_large"),
    ("too-small", snap(), chk(min_bytes=1000), "$", "too_small"),
    ("field", snap(), chk(), "$.nope", "field_missing"),
    ("scope-none", snap(), chk(scope_param="scope"), "$", "scope_not_requested"),
    (
        "scope-echo",
        snap(requested_scope="b"),
        chk(scope_param="scope", scope_echo_path="$.scope"),
        "$",
        "scope_not_echoed",
    ),
    (
        "item-scope",
        snap(requested_scope="a", body=b'{"scope":"a","items":[{"s":"a"},{"s":"z"}]}'),
        chk(
            scope_param="scope",
            scope_echo_path="$.scope",
            items_path="$.items",
            item_scope_field="s",
        ),
        "$",
        "item_out_of_scope",
    ),
    ("too-many", snap(), chk(items_path="$.items", max_items=0), "$", "too_many_items"),
    ("no-items", snap(), chk(items_path="$.n"), "$", "items_missing"),
    (
        "empty-items",
        snap(body=b'{"items": []}'),
        chk(items_path="$.items", non_empty=True),
        "$",
        "empty_where_nonempty_required",
    ),
    (
        "empty-value",
        snap(body=b"   ", content_type=None),
        ShapeCheck(parse="text", non_empty=True),
        "$",
        "empty_where_nonempty_required",
    ),
    ("read-failed", ResponseSnapshot(error="boom"), chk(), "$", "read_failed"),
]


@pytest.mark.parametrize(
    ("s", "c", "path", "code"), [x[1:] for x in CASES], ids=[x[0] for x in CASES]
)
def test_each_failure_has_its_reason(
    s: ResponseSnapshot, c: ShapeCheck, path: str, code: str
) -> None:
    v = check_shape(s, c, path)
    assert not v.ok and v.value is None
    assert code in v.reason_codes
    assert set(v.reason_codes) <= set(SHAPE_REASON_CODES)


def test_all_reason_codes_are_exercised() -> None:
    covered = {x[4] for x in CASES} | {"unknown_parser", "parser_failed"}
    assert covered == set(SHAPE_REASON_CODES)


def test_control_passes_with_value() -> None:
    c = chk(
        json_schema={"type": "object"},
        scope_param="scope",
        scope_echo_path="$.scope",
        items_path="$.items",
        item_scope_field="s",
        max_items=1,
        non_empty=True,
    )
    v = check_shape(
        snap(requested_scope="a", requested_url="http://h/x?scope=a"), c, "$.items[0].v"
    )
    assert v.ok and v.value == 1 and v.reason_codes == ()
    assert v.body_sha256 and v.body_sha256.startswith("sha256:")


def test_parsers() -> None:
    base = {"id": "s", "provider": "http", "endpoint": "/x", "normalizer": "identity@1"}
    ok = SourceContract.model_validate(
        {**base, "field_path": "$.n", "parser": "int@1", "shape": chk()}
    )
    assert read_value(snap(), ok).value == 3
    unknown = ok.model_copy(update={"parser": "nope@9"})
    assert read_value(snap(), unknown).reason_codes == ("unknown_parser",)
    wrong = ok.model_copy(update={"field_path": "$.scope"})
    assert read_value(snap(), wrong).reason_codes == ("parser_failed",)


def test_paths() -> None:
    doc = {"a": {"b": [10, {"c d": 5}]}}
    assert get_path(doc, "$.a.b[0]") == 10
    assert get_path(doc, 'a.b[1]["c d"]') == 5
    assert is_missing(get_path(doc, "$.a.x"))
    assert get_path(doc, "$") == doc
