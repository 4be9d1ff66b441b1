"""Shared helpers for the foundation tests: paths, a CLI runner, spec copies, a tiny TOML writer."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from runner.cli.main import app

REPO = Path(__file__).resolve().parents[2]
RFC8785 = REPO / "vectors" / "rfc8785"
CANONICAL = REPO / "vectors" / "canonical"
IDENTITY = REPO / "vectors" / "identity"
EXAMPLE = REPO / "specs" / "example.toml"
FIXED_EVALUATOR = "sha256:" + "0" * 64


def bench(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def copy_example(dest: Path, text: str | None = None, name: str = "example.toml") -> Path:
    """A temp copy of specs/example.toml (optionally with other text) beside its task folders."""
    if not (dest / "example-tasks").exists():
        shutil.copytree(REPO / "specs" / "example-tasks", dest / "example-tasks")
    path = dest / name
    path.write_text(EXAMPLE.read_text(encoding="utf-8") if text is None else text, "utf-8")
    return path


def example_raw() -> dict[str, Any]:
    return tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ a minimal TOML writer

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def toml_dumps(doc: dict[str, Any]) -> str:
    """Top-level scalars first, then tables and arrays of tables in the dict's order."""
    out: list[str] = []
    tables: list[str] = []
    for k, v in doc.items():
        if isinstance(v, dict):
            body = "".join(f"{_key(kk)} = {_value(vv)}\n" for kk, vv in v.items())
            tables.append(f"[{_key(k)}]\n{body}")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                body = "".join(f"{_key(kk)} = {_value(vv)}\n" for kk, vv in item.items())
                tables.append(f"[[{_key(k)}]]\n{body}")
        else:
            out.append(f"{_key(k)} = {_value(v)}\n")
    return "".join(out) + "\n" + "\n".join(tables)


def line_of(text: str, needle: str, occurrence: int = 0) -> int:
    """1-based line of the `occurrence`-th line containing `needle`."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return hits[occurrence]
