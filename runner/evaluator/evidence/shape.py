"""Payload-shape checks (DESIGN §7): what an answer must look like before a value is believed.

Pure: the runtime captures a `ResponseSnapshot` (status, content type, requested and final URL,
redirect hops, body bytes, the scope it asked for), and `check_shape` decides against the source
contract's `ShapeCheck`. A failed check is an evidence failure with specific reason codes; its
verdict never carries a value.

Reason codes (in the order they are checked; every applicable one is reported):

- `read_failed`: the read itself failed (command missing, non-zero exit, connection refused).
- `redirected`: the answer came through a redirect chain (e.g. to a login page), even ending 200.
- `status_mismatch`: the final status is not the declared one (or there is none to compare).
- `content_type_mismatch`: the media type is not the declared one.
- `too_large` / `too_small`: the body is outside the declared size bounds.
- `body_not_parseable`: the body does not parse as declared (an HTML error page in a "JSON" 200).
- `schema_invalid`: the parsed body violates the declared JSON Schema.
- `scope_not_requested`: the check binds a scope but the read asked for none.
- `scope_not_echoed`: the answer does not echo the requested scope.
- `items_missing`: the declared items path is absent or not a list.
- `item_out_of_scope`: an item lies outside the requested scope (a filter silently ignored).
- `too_many_items`: more items than the scope can hold.
- `empty_where_nonempty_required`: nothing came back where something must exist.
- `field_missing`: the contract's field path is absent from the answer.
- `unknown_parser` / `parser_failed`: the contract's parser is unknown or rejects the value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema  # type: ignore[import-untyped]
from pydantic import Field

from runner.evaluator.core.canonical import parse_json, sha256_digest
from runner.evaluator.core.types import Frozen
from runner.evaluator.protocol.spec import ShapeCheck, SourceContract

READ_FAILED = "read_failed"
REDIRECTED = "redirected"
STATUS_MISMATCH = "status_mismatch"
CONTENT_TYPE_MISMATCH = "content_type_mismatch"
TOO_LARGE = "too_large"
TOO_SMALL = "too_small"
BODY_NOT_PARSEABLE = "body_not_parseable"
SCHEMA_INVALID = "schema_invalid"
SCOPE_NOT_REQUESTED = "scope_not_requested"
SCOPE_NOT_ECHOED = "scope_not_echoed"
ITEMS_MISSING = "items_missing"
ITEM_OUT_OF_SCOPE = "item_out_of_scope"
TOO_MANY_ITEMS = "too_many_items"
EMPTY_WHERE_NONEMPTY_REQUIRED = "empty_where_nonempty_required"
FIELD_MISSING = "field_missing"
UNKNOWN_PARSER = "unknown_parser"
PARSER_FAILED = "parser_failed"

SHAPE_REASON_CODES = (
    READ_FAILED,
    REDIRECTED,
    STATUS_MISMATCH,
    CONTENT_TYPE_MISMATCH,
    TOO_LARGE,
    TOO_SMALL,
    BODY_NOT_PARSEABLE,
    SCHEMA_INVALID,
    SCOPE_NOT_REQUESTED,
    SCOPE_NOT_ECHOED,
    ITEMS_MISSING,
    ITEM_OUT_OF_SCOPE,
    TOO_MANY_ITEMS,
    EMPTY_WHERE_NONEMPTY_REQUIRED,
    FIELD_MISSING,
    UNKNOWN_PARSER,
    PARSER_FAILED,
)


class RedirectHop(Frozen):
    status: int
    location: str


class ResponseSnapshot(Frozen):
    """Everything a read returned, as captured by the runtime; the input of a shape check."""

    status: int | None = Field(default=None, description="HTTP status; None for non-HTTP reads")
    content_type: str | None = None
    requested_url: str | None = None
    final_url: str | None = None
    redirects: tuple[RedirectHop, ...] = ()
    body: bytes = b""
    requested_scope: str | None = None
    error: str | None = Field(default=None, description="why the read itself failed, if it did")


class ShapeVerdict(Frozen):
    ok: bool
    reason_codes: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    value: Any = Field(default=None, description="the value at the field path; None unless ok")
    body_sha256: str | None = None
    body_bytes: int = 0


# ----------------------------------------------------------------------------------- field paths

_PATH_TOKEN = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\[\"([^\"]*)\"\]")
_MISSING = object()


def parse_path(path: str) -> tuple[str | int, ...]:
    """`$`, `$.a.b`, `$.items[0]`, `$["odd key"]`; a bare `a.b` is read as `$.a.b`."""
    text = path.strip()
    if not text.startswith("$"):
        text = "$." + text
    rest = text[1:]
    out: list[str | int] = []
    pos = 0
    while pos < len(rest):
        m = _PATH_TOKEN.match(rest, pos)
        if not m:
            raise ValueError(f"bad field path {path!r} at {rest[pos:]!r}")
        if m.group(1) is not None:
            out.append(m.group(1))
        elif m.group(2) is not None:
            out.append(int(m.group(2)))
        else:
            out.append(m.group(3))
        pos = m.end()
    return tuple(out)


def get_path(value: Any, path: str) -> Any:
    """The value at `path`, or the module's missing sentinel (test with `is_missing`)."""
    node = value
    for part in parse_path(path):
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return _MISSING
            node = node[part]
        else:
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
    return node


def is_missing(value: Any) -> bool:
    return value is _MISSING


# ------------------------------------------------------------------------------------- parsers


def _parse_int(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a boolean is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,16}", value.strip()):
        return int(value.strip())
    raise ValueError(f"{value!r} is not an integer")


def _parse_float(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        out = float(value.strip())
    else:
        raise ValueError(f"{value!r} is not a number")
    if not math.isfinite(out):
        raise ValueError(f"{value!r} is not finite")
    return out


def _parse_text(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        raise ValueError(f"{value!r} is not text")
    return str(value)


def _parse_json(value: Any) -> Any:
    return value


PARSERS: Mapping[str, Callable[[Any], Any]] = {
    "int@1": _parse_int,
    "float@1": _parse_float,
    "text@1": _parse_text,
    "json@1": _parse_json,
}


# --------------------------------------------------------------------------------------- checks


def _media_type(content_type: str | None) -> str | None:
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def _decode_body(body: bytes, parse: str) -> Any:
    text = body.decode("utf-8")
    if parse == "json":
        return parse_json(text)
    if parse == "text":
        return text.strip()
    if parse == "int":
        return _parse_int(text)
    return _parse_float(text)


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _redirected(snap: ResponseSnapshot) -> bool:
    if snap.redirects:
        return True
    if snap.requested_url and snap.final_url:
        return snap.requested_url != snap.final_url
    return False


def _query_scope(url: str | None, param: str) -> list[str]:
    if not url:
        return []
    return parse_qs(urlsplit(url).query).get(param, [])


def check_shape(snap: ResponseSnapshot, check: ShapeCheck, field_path: str = "$") -> ShapeVerdict:
    """Is `snap` shaped as `check` declares? If so the verdict carries the value at the path."""
    reasons: list[str] = []
    details: list[str] = []

    def fail(code: str, detail: str) -> None:
        if code not in reasons:
            reasons.append(code)
        details.append(f"{code}: {detail}")

    body_sha = sha256_digest(snap.body)

    def verdict(value: Any = None) -> ShapeVerdict:
        ok = not reasons
        return ShapeVerdict(
            ok=ok,
            reason_codes=tuple(reasons),
            details=tuple(details),
            value=value if ok else None,
            body_sha256=body_sha,
            body_bytes=len(snap.body),
        )

    if snap.error is not None:
        fail(READ_FAILED, snap.error)
        return verdict()
    if _redirected(snap):
        hops = " -> ".join(f"{h.status} {h.location}" for h in snap.redirects)
        fail(REDIRECTED, f"redirect chain {hops or snap.final_url!r} ended in {snap.status}")
    if check.status is not None and snap.status != check.status:
        fail(STATUS_MISMATCH, f"expected status {check.status}, got {snap.status}")
    if check.content_type is not None:
        want, got = _media_type(check.content_type), _media_type(snap.content_type)
        if want != got:
            fail(CONTENT_TYPE_MISMATCH, f"expected {want}, got {got}")
    if len(snap.body) > check.max_bytes:
        fail(TOO_LARGE, f"{len(snap.body)} bytes > max {check.max_bytes}")
    if len(snap.body) < check.min_bytes:
        fail(TOO_SMALL, f"{len(snap.body)} bytes < min {check.min_bytes}")

    try:
        parsed = _decode_body(snap.body, check.parse)
    except (UnicodeDecodeError, ValueError) as exc:
        head = snap.body[:60].decode("utf-8", "replace")
        fail(BODY_NOT_PARSEABLE, f"not {check.parse}: {exc} (body starts {head!r})")
        return verdict()

    if check.json_schema is not None:
        try:
            validator_cls = jsonschema.validators.validator_for(check.json_schema)
            validator = validator_cls(check.json_schema)
            errors = sorted(validator.iter_errors(parsed), key=lambda e: list(e.absolute_path))
        except jsonschema.exceptions.SchemaError as exc:
            fail(SCHEMA_INVALID, f"the declared schema is itself invalid: {exc.message}")
        else:
            for e in errors[:3]:
                where = "/".join(str(p) for p in e.absolute_path) or "(root)"
                fail(SCHEMA_INVALID, f"at {where}: {e.message}")

    scope = snap.requested_scope
    if check.scope_param is not None:
        if scope is None:
            fail(SCOPE_NOT_REQUESTED, f"no {check.scope_param!r} scope was requested")
        else:
            sent = _query_scope(snap.requested_url, check.scope_param)
            if snap.requested_url is not None and sent != [scope]:
                fail(SCOPE_NOT_REQUESTED, f"request URL carries {check.scope_param}={sent}")
            if check.scope_echo_path is not None:
                echoed = get_path(parsed, check.scope_echo_path)
                if is_missing(echoed) or echoed != scope:
                    shown = "nothing" if is_missing(echoed) else repr(echoed)
                    fail(SCOPE_NOT_ECHOED, f"requested {scope!r}, answer echoes {shown}")

    items: Sequence[Any] | None = None
    if check.items_path is not None:
        found = get_path(parsed, check.items_path)
        if is_missing(found) or not isinstance(found, list):
            fail(ITEMS_MISSING, f"no list at {check.items_path}")
        else:
            items = found
    if items is not None:
        if check.item_scope_field is not None and scope is not None:
            outside = [
                i for i, item in enumerate(items) if get_path(item, check.item_scope_field) != scope
            ]
            if outside:
                fail(
                    ITEM_OUT_OF_SCOPE,
                    f"{len(outside)} of {len(items)} items are not in scope {scope!r} "
                    f"(first: index {outside[0]})",
                )
        if check.max_items is not None and len(items) > check.max_items:
            fail(TOO_MANY_ITEMS, f"{len(items)} items > the scope's maximum {check.max_items}")
        if check.non_empty and not items:
            fail(EMPTY_WHERE_NONEMPTY_REQUIRED, f"zero items at {check.items_path}")

    value = get_path(parsed, field_path)
    if is_missing(value):
        fail(FIELD_MISSING, f"nothing at {field_path}")
        return verdict()
    if check.non_empty and items is None and _is_empty(value):
        fail(EMPTY_WHERE_NONEMPTY_REQUIRED, f"empty value at {field_path}")
    return verdict(value)


def read_value(snap: ResponseSnapshot, contract: SourceContract) -> ShapeVerdict:
    """Shape-check a read against its source contract, then apply the contract's parser."""
    verdict = check_shape(snap, contract.shape, contract.field_path)
    if not verdict.ok:
        return verdict
    parser = PARSERS.get(contract.parser)
    if parser is None:
        return verdict.model_copy(
            update={
                "ok": False,
                "value": None,
                "reason_codes": (UNKNOWN_PARSER,),
                "details": (f"{UNKNOWN_PARSER}: {contract.parser}; known: {sorted(PARSERS)}",),
            }
        )
    try:
        value = parser(verdict.value)
    except (ValueError, TypeError) as exc:
        return verdict.model_copy(
            update={
                "ok": False,
                "value": None,
                "reason_codes": (PARSER_FAILED,),
                "details": (f"{PARSER_FAILED}: {contract.parser}: {exc}",),
            }
        )
    return verdict.model_copy(update={"value": value})
