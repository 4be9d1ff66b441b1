"""Loading a spec file: TOML -> `Spec`, and every input mistake as an InputError at a key and line.

tomllib keeps no source positions, so the line of a failing key is found again in the text by a
best-effort locator (`_locate_line`). The models and their rules are in spec.py.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from runner.evaluator.core.bounded import (
    SPEC_CAP,
    TREE_CAP,
    check_path,
    read_text_bounded,
    tree_problem,
)
from runner.evaluator.core.canonical import MAX_DEPTH, CanonicalError, canonical_bytes
from runner.evaluator.core.errors import InputError, shorten
from runner.evaluator.core.inputs import project_root

from .spec import LocatedError, Spec


def _keypath(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# A best-effort locator of a key path in TOML source: tomllib keeps no positions, so we find the
# [table] / [[array]] headers, then `key =` inside a table's body, then walk inline arrays and
# inline tables element by element. It returns the deepest line it could match (the table's
# header when a key is missing), or None.

_HEADER = re.compile(r"^[ \t]*(\[\[?)[ \t]*([^\[\]#]+?)[ \t]*\]\]?[ \t]*(?:#.*)?$", re.MULTILINE)


def _name_parts(name: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in name.split("."))


def _skip_blank(text: str, pos: int) -> int:
    while pos < len(text):
        if text[pos] in " \t\r\n":
            pos += 1
        elif text[pos] == "#":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
        else:
            break
    return pos


def _skip_string(text: str, pos: int) -> int:
    quote = text[pos]
    if text.startswith(quote * 3, pos):
        end = text.find(quote * 3, pos + 3)
        return len(text) if end < 0 else end + 3
    pos += 1
    while pos < len(text) and text[pos] != quote and text[pos] != "\n":
        pos += 2 if quote == '"' and text[pos] == "\\" else 1
    return pos + 1


def _inline_items(text: str, pos: int) -> list[tuple[int, int]]:
    """(start of item, start of its value) for each item of the inline [..] or {..} at pos."""
    items: list[tuple[int, int]] = []
    depth, item_start = 0, None
    while pos < len(text):
        pos = _skip_blank(text, pos) if depth == 1 else pos
        if pos >= len(text):
            break
        c = text[pos]
        if c in "\"'":
            if depth == 1 and item_start is None:
                item_start = pos
            pos = _skip_string(text, pos)
            continue
        if c == "#":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
            continue
        if c in "[{":
            depth += 1
            if depth == 2 and item_start is None:
                item_start = pos
        elif c in "]}":
            depth -= 1
            if depth == 0:
                if item_start is not None:
                    items.append((item_start, item_start))
                return items
        elif c == "," and depth == 1:
            if item_start is not None:
                items.append((item_start, item_start))
            item_start = None
        elif depth == 1 and item_start is None and c not in " \t\r\n":
            item_start = pos
        pos += 1
    return items


def _inline_find(text: str, pos: int, loc: tuple[Any, ...]) -> int:
    """Deepest position of `loc` inside the inline value starting at `pos`."""
    for part in loc:
        pos = _skip_blank(text, pos)
        if pos >= len(text):
            break
        items = _inline_items(text, pos)
        if isinstance(part, int):
            if text[pos] != "[" or part >= len(items):
                break
            pos = items[part][0]
            continue
        if text[pos] != "{":
            break
        key = re.compile(r"[\"']?" + re.escape(str(part)) + r"[\"']?[ \t]*=[ \t]*")
        for start, _ in items:
            m = key.match(text, start)
            if m:
                pos = m.end()
                break
        else:
            break
    return pos


def _locate_line(text: str, loc: tuple[Any, ...]) -> int | None:
    if not loc:
        return None
    headers = [
        (m.start(), _name_parts(m.group(2)), m.group(1) == "[[") for m in _HEADER.finditer(text)
    ]
    # The current table: where its header is, where its own keys end, where its extent ends.
    header_pos: int | None = None
    body = (0, headers[0][0] if headers else len(text))
    extent = (0, len(text))
    name: tuple[str, ...] = ()
    parts = list(loc)
    i = 0
    while i < len(parts):
        part = parts[i]
        if isinstance(part, int):
            break
        key = re.compile(
            r"^[ \t]*[\"']?" + re.escape(str(part)) + r"[\"']?[ \t]*[=.][ \t]*", re.MULTILINE
        )
        m = key.search(text, body[0], body[1])
        if m:
            pos = _inline_find(text, m.end(), tuple(parts[i + 1 :]))
            return text.count("\n", 0, pos) + 1
        want = (*name, str(part))
        matches = [(p, arr) for p, n, arr in headers if n == want and extent[0] <= p < extent[1]]
        if not matches:
            break
        is_array = matches[0][1]
        if is_array and i + 1 < len(parts) and isinstance(parts[i + 1], int):
            if parts[i + 1] >= len(matches):
                break
            chosen = matches[parts[i + 1]][0]
            i += 2
        else:
            chosen = matches[0][0]
            i += 1
        later = [(p, n) for p, n, _ in headers if p > chosen]
        body = (chosen, later[0][0] if later else len(text))
        end = next((p for p, n in later if n[: len(want)] != want or n == want), extent[1])
        extent = (chosen, end)
        header_pos, name = chosen, want
    if header_pos is None:
        return None
    return text.count("\n", 0, header_pos) + 1


_TOML_LINE = re.compile(r"at line (\d+)")


def load_spec(path: Path) -> Spec:
    """Parse and validate a spec file; every input mistake becomes an InputError."""
    name = str(path)
    try:  # a regular file, size-capped, read without blocking
        text = read_text_bounded(path, SPEC_CAP)
    except InputError as exc:
        raise InputError(f"cannot read spec: {exc.message}", file=name) from exc
    return parse_spec(text, path)


def parse_spec(text: str, path: Path) -> Spec:
    """`load_spec` on a spec's text already read (bounded) by the caller: the same checks and
    located errors. `path` names the file in errors and anchors its relative paths."""
    name = str(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        raise InputError(
            f"malformed TOML: {exc}", file=name, line=int(m.group(1)) if m else None
        ) from exc
    except RecursionError as exc:  # tomllib recurses per nesting level (~500 levels)
        raise InputError(f"malformed TOML: nested more than {MAX_DEPTH} levels", file=name) from exc
    deep = _too_deep(raw)
    if deep is not None:
        raise InputError(
            f"nested more than {MAX_DEPTH} levels deep",
            file=name,
            key=_keypath(deep) or None,
            line=_locate_line(text, deep[:8]),
        )
    try:
        canonical_bytes(_plain(raw))
    except CanonicalError as exc:
        loc = _pointer_loc(raw, exc.path)
        msg = str(exc).split(": ", 1)[-1]
        if "has no JSON representation" in msg:
            msg += "; expected a string, number, boolean, array or table (quote dates and times)"
        raise InputError(
            msg,
            file=name,
            key=_keypath(loc) or None,
            line=_locate_line(text, loc),
        ) from exc
    try:
        spec = Spec.model_validate(raw)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        err = errors[0]
        loc = tuple(err["loc"])
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, LocatedError):
            loc = ctx_err.loc
            msg = str(ctx_err)
        else:
            msg = _describe(err, loc)
        more = "".join(
            f"; also at `{_keypath(tuple(e['loc']))}`: {_describe(e, tuple(e['loc']))}"
            for e in errors[1:3]
        )
        if len(errors) > 3:
            more += f" (and {len(errors) - 3} more problems)"
        raise InputError(
            msg + more, file=name, key=_keypath(loc) or None, line=_locate_line(text, loc)
        ) from exc
    _check_paths(spec, path, text)
    return spec


def _too_deep(raw: Any) -> tuple[str | int, ...] | None:
    """The key path of the first value nested deeper than MAX_DEPTH, walked without recursion
    (a deep value must not crash the walk that looks for it)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(raw, ())]
    while stack:
        node, loc = stack.pop()
        if len(loc) > MAX_DEPTH:
            return loc
        if isinstance(node, dict):
            stack.extend((v, (*loc, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*loc, i)) for i, v in enumerate(node))
    return None


def _pointer_loc(raw: Any, pointer: str) -> tuple[str | int, ...]:
    """A CanonicalError's JSON-pointer-like path as a key path (list indices as ints)."""
    loc: list[str | int] = []
    node = raw
    for token in [t for t in pointer.split("/") if t]:
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            loc.append(int(key))
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            loc.append(key)
            node = node[key]
        else:
            loc.append(key)
            node = None
    return tuple(loc)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The spec model that holds the key at `loc` (for listing the keys it accepts)."""
    model: Any = Spec
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        field = fields.get(str(part))
        if field is None:
            return None
        model = _unwrap_model(field.annotation)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _describe(err: Any, loc: tuple[Any, ...] = ()) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        if model is None:
            return "unknown key (not part of the spec language)"
        allowed = sorted(f.alias or n for n, f in model.model_fields.items())
        return f"unknown key {loc[-1]!r}; expected one of: {', '.join(allowed)}"
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    got = err.get("input")
    shown = f" (got {shorten(repr(got))})" if not isinstance(got, dict | list) else ""
    return "expected: " + str(err["msg"]).removeprefix("Value error, ") + shown


def _plain(value: Any) -> Any:
    # A plain copy; TOML dates/times have no JSON form, so canonical_bytes then rejects them with
    # their key path, as input errors.
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _check_paths(spec: Spec, spec_path: Path, text: str = "") -> None:
    base = spec_path.resolve().parent
    checks: list[tuple[tuple[str | int, ...], str]] = []
    for si, s in enumerate(spec.task_sets):
        for ti, t in enumerate(s.tasks):
            if t.path is not None:
                checks.append((("task_sets", si, "tasks", ti, "path"), t.path))
    for loc, rel in checks:
        key, line = _keypath(loc), _locate_line(text, loc)
        try:
            check_path(rel)
            resolved = (base / rel).resolve()
        except InputError as exc:
            raise InputError(exc.message, file=str(spec_path), key=key, line=line) from exc
        except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: a symlink loop (3.11)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InputError(
                f"path {shorten(repr(rel))} cannot be resolved: {shorten(why)}",
                file=str(spec_path),
                key=key,
                line=line,
            ) from exc
        if Path(rel).is_absolute() or not resolved.is_relative_to(base):
            raise InputError(
                f"path {rel!r} escapes the spec's folder; expected a path relative to, and "
                f"inside, {base}",
                file=str(spec_path),
                key=key,
                line=line,
            )
        if not resolved.exists():
            raise InputError(
                f"path {shorten(repr(rel))} does not exist (relative to {base})",
                file=str(spec_path),
                key=key,
                line=line,
            )
        odd = tree_problem(resolved)  # lstat only: nothing blocks, nothing big is read
        if odd is not None:
            raise InputError(
                f"path {shorten(repr(rel))} holds {odd}; a task folder holds only regular "
                f"files, directories and symlinks, at most {TREE_CAP >> 20} MiB in all",
                file=str(spec_path),
                key=key,
                line=line,
            )
    root = project_root()
    for i, c in enumerate(spec.grader.code):
        key = f"grader.code[{i}]"
        try:
            check_path(c)
            resolved = (root / c).resolve()
            inside = resolved.is_relative_to(root) and stat.S_ISREG(os.stat(resolved).st_mode)
        except (InputError, OSError, RuntimeError, ValueError):
            inside = False
        if Path(c).is_absolute() or not inside:
            raise InputError(
                f"grader file {shorten(repr(c))} is not a file inside the checkout {root}",
                file=str(spec_path),
                key=key,
            )
    if spec.grader.image and not (root / "images" / spec.grader.image).is_dir():
        raise InputError(
            f"no image folder images/{spec.grader.image} in the checkout",
            file=str(spec_path),
            key="grader.image",
        )


def spec_base(spec_path: Path) -> Path:
    return spec_path.resolve().parent
