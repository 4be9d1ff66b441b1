"""No import cycle among `runner/` modules (issue 24).

The graph is built from the source, not from `sys.modules`: every `runner/**/*.py` is parsed and
every import counts, wherever it stands (module level, inside a function, under
`if TYPE_CHECKING:`): a lazy import hides a knot, it does not cut it. An edge goes from a module to
what executing it may execute:

- `import a.b.c` runs `a/__init__`, `a/b/__init__` and `a/b/c`: an edge to each. The packages the
  importing module itself lives in are left out of these implicit edges (they are always being
  imported already when it runs, so such an edge would only restate the tree).
- `from a.b import n` runs `a.b` and, when `n` is a submodule, `a.b.n`; when `n` is not a
  submodule it is read from `a.b`'s namespace, so the edge to `a.b` counts even when `a.b` is the
  importing module's own package (`from . import helper` defined in `__init__.py`).
- Relative imports are resolved against the module's package.
- Dynamic imports (`importlib.import_module`, `__import__`) are not edges: the one there is, the
  fault registry discovering `runner/runtime/faults/<kind>.py`, is a plugin seam whose static
  edge points the other way (each kind imports the registry to register itself). Every module
  making one must be declared in `DISCOVERY` with why; an undeclared one fails a test.

Strongly connected components (Tarjan) of more than one module are cycles (a module naming itself
is no edge). Negative tests plant a two-module cycle and one through a package `__init__`.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module and package under root/runner, by dotted name."""
    return {
        module_name(f, root): f
        for f in sorted((root / "runner").rglob("*.py"))
        if "__pycache__" not in f.parts
    }


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


# module -> why its dynamic import is a plugin seam rather than a dependency
DISCOVERY = {
    "runner.runtime.faults.registry": "discovers the fault-kind modules, which import it to "
    "register themselves",
    "runner.runtime.sandbox.registry": "discovers the sandbox backend modules, which import it "
    "to register themselves",
    "runner.runtime.subjects.registry": "discovers the subject adapter modules, which import it "
    "to register themselves",
}


def dynamic_import_sites(root: Path = ROOT) -> set[str]:
    """Modules calling importlib.import_module or __import__ (their targets are not static)."""
    found = set()
    for name, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if called in ("import_module", "__import__"):
                    found.add(name)
    return found


def _resolve(node: ast.ImportFrom, here: str, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module or ""
    package = here if is_package else here.rpartition(".")[0]
    parts = package.split(".") if package else []
    if node.level - 1 >= len(parts):
        return None  # beyond the top package: not a runner module
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def edges_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The runner modules that executing `name` may execute (see the module docstring)."""
    own = {*_ancestors(name), name}
    out: set[str] = set()

    def chain(target: str) -> Iterable[str]:
        # the packages run on the way to `target` (implicit), then the target (explicit)
        yield from (a for a in _ancestors(target) if a not in own)
        yield target

    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.update(chain(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, name, path.name == "__init__.py")
            if base is None:
                continue
            if base not in own:
                out.update(chain(base))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in mods:
                    out.update(chain(sub))
                else:  # an attribute of base (or `*`): base's body must have run
                    out.add(base)
    return {m for m in out if m in mods and m != name}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: edges_of(name, path, mods) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan, iterative), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in g:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def describe(found: list[list[str]]) -> str:
    return "\n".join(f"  {len(c)} modules: {', '.join(c)}" for c in found)


def test_no_import_cycle_among_runner_modules() -> None:
    g = graph()
    assert len(g) > 150 and "runner.evaluator.core.canonical" in g  # the whole tree was read
    found = cycles(g)
    assert not found, f"import cycles among runner/ modules:\n{describe(found)}"


def test_every_dynamic_import_is_declared() -> None:
    sites = dynamic_import_sites()
    assert sites == set(DISCOVERY), (
        f"dynamic imports not declared in DISCOVERY (say why each is not a dependency): "
        f"{sorted(sites - set(DISCOVERY))}; declared but gone: {sorted(set(DISCOVERY) - sites)}"
    )


# --- the checker finds what it must (planted trees) ----------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_an_acyclic_tree_has_no_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "runner/__init__.py": "",
            "runner/pkg/__init__.py": "from .a import f\n",
            "runner/pkg/a.py": "from . import b\nfrom runner.other import c\n",
            "runner/pkg/b.py": "",
            "runner/other/__init__.py": "",
            "runner/other/c.py": "import json\n",
            "runner/other/d.py": "from runner.pkg import b\nimport runner.other.c\n",
        },
    )
    assert cycles(graph(root)) == []


def test_a_planted_two_module_cycle_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "runner/__init__.py": "",
            "runner/pkg/__init__.py": "",
            "runner/pkg/a.py": "def f():\n    from runner.pkg.b import g  # lazy: still counts\n",
            "runner/pkg/b.py": "from . import a\n",
            "runner/pkg/c.py": "from .a import f\n",  # imports into the cycle, not part of it
        },
    )
    assert cycles(graph(root)) == [["runner.pkg.a", "runner.pkg.b"]]


def test_a_planted_relative_cycle_across_packages_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "runner/__init__.py": "",
            "runner/x/__init__.py": "",
            "runner/x/deep/__init__.py": "",
            "runner/x/deep/a.py": "from ...y.b import thing\n",
            "runner/y/__init__.py": "",
            "runner/y/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from runner.x.deep import a\n",
        },
    )
    assert cycles(graph(root)) == [["runner.x.deep.a", "runner.y.b"]]


def test_a_planted_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    # pkg/__init__ re-exports from pkg.a; a imports other.c; other.c imports pkg.b, which runs
    # pkg/__init__ first: pkg -> pkg.a -> other.c -> pkg. No file names `pkg` alone.
    root = _tree(
        tmp_path,
        {
            "runner/__init__.py": "",
            "runner/pkg/__init__.py": "from .a import f\n",
            "runner/pkg/a.py": "from runner.other import c\ndef f(): ...\n",
            "runner/pkg/b.py": "",
            "runner/other/__init__.py": "",
            "runner/other/c.py": "import runner.pkg.b\n",
        },
    )
    found = cycles(graph(root))
    assert found == [["runner.other.c", "runner.pkg", "runner.pkg.a"]], found


def test_a_name_read_from_the_own_package_init_counts(tmp_path: Path) -> None:
    # `from . import helper` where helper is defined in __init__ (not a submodule): a needs the
    # package body to have run, and the package body imports a.
    root = _tree(
        tmp_path,
        {
            "runner/__init__.py": "",
            "runner/pkg/__init__.py": "helper = 1\nfrom .a import f\n",
            "runner/pkg/a.py": "from . import helper\ndef f(): ...\n",
        },
    )
    assert cycles(graph(root)) == [["runner.pkg", "runner.pkg.a"]]
    # a submodule imported with `from . import b` does not need the package body: no cycle
    (root / "runner/pkg/b.py").write_text("")
    (root / "runner/pkg/a.py").write_text("from . import b\ndef f(): ...\n")
    assert cycles(graph(root)) == []


def test_a_planted_cycle_in_a_copy_of_the_real_tree_is_found(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = cycles(graph(tmp_path))
    canonical = tmp_path / "runner/evaluator/core/canonical.py"
    canonical.write_text(
        canonical.read_text() + "\n\ndef _planted():\n    from runner.cli import main\n"
    )
    after = cycles(graph(tmp_path))
    new = [c for c in after if c not in before]
    assert new and any(
        "runner.evaluator.core.canonical" in c and "runner.cli.main" in c for c in new
    ), describe(after)


def test_a_planted_undeclared_dynamic_import_is_refused(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "runner/runtime/planted.py").write_text(
        "import importlib\nimportlib.import_module('runner.cli.main')\n"
    )
    assert dynamic_import_sites(tmp_path) - set(DISCOVERY) == {"runner.runtime.planted"}
