"""Dependencies point one way: cli -> (runtime, benchmarks, imagebuild) -> evaluator.

The evaluator never imports the runtime, the CLI or a benchmark (doing is separate from
judging, and `evaluator_digest` must cover everything a decision depends on); the runtime never
imports a benchmark or the CLI (it knows no benchmark: a `Workload` is handed to it).
Every module under a layer is checked, subpackages included, with relative imports resolved.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import load_declaration

ROOT = Path(__file__).resolve().parents[2]

# layer -> module prefixes it must never import
ABOVE_RUNTIME = (
    "runner.cli",
    "runner.orchestrate",
    "runner.history",
    "runner.report",
    "runner.scale",
    "runner.signing",  # the private key: nothing that judges or does may reach it
)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "runner.evaluator": (
        *ABOVE_RUNTIME,
        "runner.runtime",
        "runner.subjects",
        "runner.benchmarks",
        "runner.imagebuild",
    ),
    "runner.runtime": (*ABOVE_RUNTIME, "runner.benchmarks", "runner.imagebuild"),
    "runner.benchmarks": ABOVE_RUNTIME,
    "runner.imagebuild": (*ABOVE_RUNTIME, "runner.runtime", "runner.benchmarks"),
    "runner.report": (
        "runner.cli",
        "runner.orchestrate",
        "runner.runtime",
        "runner.benchmarks",
        "runner.signing",
    ),
    "runner.subjects": ("runner.",),  # stdlib only: subjects run outside the runner's venv
    "runner.benchmarks.swe_lite.subjects": ("runner.",),  # the oracles: stdlib only, likewise
}


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> list[str]:
    """Absolute names of every module `path` imports; relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    names.append("<beyond the top package>")
                    continue
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                if node.module:
                    base = f"{base}.{node.module}"
            names.append(base)
            # `from pkg import module` imports pkg.module too
            names += [f"{base}.{a.name}" for a in node.names]
    return names


def violations(root: Path = ROOT) -> list[str]:
    out = []
    for layer, forbidden in FORBIDDEN.items():
        folder = root.joinpath(*layer.split("."))
        for f in sorted(folder.rglob("*.py")):
            for name in imports_of(f, root):
                if name.startswith(forbidden) or name == "<beyond the top package>":
                    out.append(f"{f.relative_to(root)} imports {name}")
    return out


def test_layers_import_only_downwards() -> None:
    assert len(list((ROOT / "runner" / "evaluator").rglob("*.py"))) > 20
    assert violations() == []


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("runner/evaluator/verdict/planted.py", "from runner.runtime.host import naming\n"),
        ("runner/evaluator/verdict/planted.py", "from ...runtime import executor\n"),
        ("runner/evaluator/planted.py", "import runner.cli.app\n"),
        ("runner/runtime/attempt/planted.py", "from runner.benchmarks.swe_lite import grade\n"),
        ("runner/runtime/planted.py", "from ..benchmarks import swe_lite\n"),
        ("runner/runtime/host/planted.py", "from runner import orchestrate\n"),
        ("runner/subjects/planted.py", "from runner.evaluator.core import canonical\n"),
        (
            "runner/benchmarks/swe_lite/subjects/planted.py",
            "from runner.benchmarks import registry\n",
        ),
    ],
)
def test_a_planted_upward_import_is_caught(tmp_path: Path, where: str, line: str) -> None:
    # A copy of the package tree with one bad import added: the checker must name it.
    import shutil

    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / where).write_text(line)
    found = violations(tmp_path)
    assert len(found) >= 1 and all(f.startswith(where) for f in found), found


def test_every_evaluator_file_is_a_declared_input() -> None:
    decl = load_declaration(ROOT)
    assert "runner/evaluator" in decl.paths
    assert "witnesses" in decl.paths and "schemas" in decl.paths and "uv.lock" in decl.paths
