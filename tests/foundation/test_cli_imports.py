"""No import cycle among the CLI's modules: shared options live in options.py, display in
display.py, the historical-evaluator logic in runner/history.py; no command module imports
another (issue 24). Every import counts, a lazy one inside a function too. A planted cycle fails.
"""

from __future__ import annotations

import graphlib
from pathlib import Path

import pytest

from tests.foundation.test_layering import ROOT, imports_of, module_name

CLI = ROOT / "runner" / "cli"
# what every command module may import; they import no command module (nor main)
SHARED = {
    "runner.cli",
    "runner.cli.app",
    "runner.cli.options",
    "runner.cli.display",
    "runner.cli.reading",
}


def graph(folder: Path, root: Path = ROOT) -> dict[str, set[str]]:
    files = sorted(folder.glob("*.py"))
    mods = {module_name(f, root) for f in files}
    return {
        module_name(f, root): {n for n in imports_of(f, root) if n in mods} - {module_name(f, root)}
        for f in files
    }


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(g).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_no_import_cycle_among_cli_modules() -> None:
    found = cycle(graph(CLI))
    assert found is None, f"import cycle: {' -> '.join(found or [])}"


def test_command_modules_import_only_the_shared_modules() -> None:
    g = graph(CLI)
    bad = {
        m: sorted(deps - SHARED)
        for m, deps in g.items()
        if m not in SHARED and m != "runner.cli.main" and deps - SHARED
    }
    assert not bad, f"a command module imports another command module: {bad}"
    for shared in SHARED:
        assert not (g.get(shared, set()) - SHARED), f"{shared} imports a command module"


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "runner" / "cli"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from runner.cli.b import g\n")
    (pkg / "b.py").write_text("from . import a\n")
    found = cycle(graph(pkg, tmp_path))
    assert found is not None and set(found) >= {"runner.cli.a", "runner.cli.b"}


@pytest.mark.parametrize("name", ["keys", "reproduce", "evidence", "run"])
def test_the_former_circle_is_cut(name: str) -> None:
    deps = graph(CLI)[f"runner.cli.{name}"]
    assert deps <= SHARED, deps


# The logic a command's library call holds: a command module imports none of it (lazily neither);
# the shared reading entry (reading.py) may locate a scorecard's bundle
LIBRARY_ONLY = (
    "runner.history",  # runner/reproduction.py, runner/signing/run.py
    "runner.evaluator.publish.reproduce",  # runner/reproduction.py
    "runner.evaluator.publish.stats",  # runner/planning.py
    "runner.evaluator.publish.compare",  # runner/comparison.py
    "runner.evaluator.trust.bundle",  # runner/verification.py
    "runner.evaluator.protocol.matrix",  # runner/planning.py
    "runner.evaluator.protocol.identities",  # runner/planning.py
    "runner.evaluator.protocol.specload",  # runner/planning.py, runner/envcheck.py
    "runner.evaluator.environment.conformance",  # runner/envcheck.py
    "runner.runtime.envcollect",  # runner/envcheck.py
)


COMMANDS = [p for p in sorted(CLI.glob("*.py")) if module_name(p) not in SHARED]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_command_modules_leave_the_logic_to_the_library(path: Path) -> None:
    found = sorted({n for n in imports_of(path) if n.startswith(LIBRARY_ONLY)})
    assert not found, f"{path.name} imports {found}: call the library that holds it"


def test_a_command_module_holding_logic_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "runner" / "cli"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("def f():\n    from runner.history import repository\n")
    assert any(n.startswith(LIBRARY_ONLY) for n in imports_of(pkg / "bad.py", tmp_path))
