"""The evaluator never imports the runtime or the CLI (doing is separate from judging)."""

from __future__ import annotations

import ast
from pathlib import Path

from runner.evaluator.inputs import load_declaration

ROOT = Path(__file__).resolve().parents[2]
EVALUATOR = ROOT / "runner" / "evaluator"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.append(node.module)
            elif node.level > 1:
                names.append("." * node.level + (node.module or ""))
    return names


def test_evaluator_imports_nothing_of_the_runtime_or_cli() -> None:
    files = sorted(EVALUATOR.glob("*.py"))
    assert len(files) > 10
    for f in files:
        for name in _imports(f):
            assert not name.startswith(("runner.runtime", "runner.cli", "runner.subjects")), (
                f"{f.name} imports {name}"
            )
            assert not name.startswith(".."), f"{f.name} reaches outside the evaluator: {name}"


def test_every_evaluator_file_is_a_declared_input() -> None:
    decl = load_declaration(ROOT)
    assert "runner/evaluator" in decl.paths
    assert "witnesses" in decl.paths and "schemas" in decl.paths and "uv.lock" in decl.paths
