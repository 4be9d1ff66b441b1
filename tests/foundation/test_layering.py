"""Dependencies point one way: cli -> (runtime, benchmarks, imagebuild) -> evaluator, and inside
the evaluator core < protocol < evidence < environment < verdict < publish < trust.

The evaluator never imports the runtime, the CLI or a benchmark (doing is separate from
judging, and `evaluator_digest` must cover everything a decision depends on); the runtime never
imports a benchmark or the CLI (it knows no benchmark: a `Workload` is handed to it).
Every module under a layer is checked, subpackages included, with relative imports resolved.
Inside the runtime its own order holds too (`RUNTIME_ORDER`), and it has no import cycle.
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
    "runner.benchmarks.tau_lite.subjects": ("runner.",),
}
# modules a layer may import although FORBIDDEN covers them (their names, their packages' and
# their attributes'): imagebuild loads images into a sandbox backend's store, found through the
# backend registry (never a backend module itself)
ALLOWED: dict[str, tuple[str, ...]] = {"runner.imagebuild": ("runner.runtime.sandbox.registry",)}


def allowed(layer: str, name: str) -> bool:
    return any(
        name == m or m.startswith(name + ".") or name.startswith(m + ".")
        for m in ALLOWED.get(layer, ())
    )


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
                if allowed(layer, name):
                    continue
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
        ("runner/imagebuild/planted.py", "from runner.runtime.sandbox import podman\n"),
        (
            "runner/imagebuild/planted.py",
            "from runner.runtime.sandbox.registry import x\nimport runner.runtime.host\n",
        ),
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


# --- the runtime's own order --------------------------------------------------------------------

# runner/runtime/, low to high: a module may import its own group and any group listed before
# it, never one after it; groups sharing a tuple are one level and import none of each other.
# A group is the first name under runner/runtime/ (a folder or a module). A new folder or module
# must be placed here (the check refuses an unplaced one): one line to edit.
RUNTIME_ORDER: tuple[str | tuple[str, ...], ...] = (
    "prepared",  # the spec read once (imports only the evaluator)
    "host",  # namespaces, nft, processes, podman service, naming
    "sandbox",  # the Sandbox protocol and its backends
    "events",  # what interposers tell the trigger engine (CallEvent, Directive, Decision)
    "cassettes",  # the model proxy's cassette formats (scripted, policy)
    "interposers",  # tool interposer, egress proxy, destination, model proxy, MCP
    "faults",  # fault plugins, built from an attempt's resources
    "attempt",  # one attempt: the trigger engine, wiring, subject, run
    "workload",  # what a benchmark hands the runtime
    "subjects",  # subject adapters, one per module, and their config grammars
    ("executor", "selftest", "cellselect", "envcollect", "schemas", "sweep"),
)


def _levels(order: tuple[str | tuple[str, ...], ...] = RUNTIME_ORDER) -> dict[str, int]:
    return {g: i for i, lvl in enumerate(order) for g in ((lvl,) if isinstance(lvl, str) else lvl)}


def _runtime_group(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["runner", "runtime"] else None


def runtime_order_violations(
    root: Path = ROOT, order: tuple[str | tuple[str, ...], ...] = RUNTIME_ORDER
) -> list[str]:
    """Imports inside runner/runtime that climb RUNTIME_ORDER (or cross within a level), and
    folders or modules of runner/runtime that the order does not place."""
    level = _levels(order)
    runtime = root / "runner" / "runtime"
    out = []
    for entry in sorted(runtime.iterdir()):
        name = entry.stem if entry.suffix == ".py" else entry.name
        placeable = entry.suffix == ".py" or (entry / "__init__.py").exists()
        if placeable and name != "__init__" and name not in level:
            out.append(f"runner/runtime/{entry.name} is not placed in RUNTIME_ORDER")
    for f in sorted(runtime.rglob("*.py")):
        here = _runtime_group(module_name(f, root))
        if here is None or here not in level:
            continue
        for name in imports_of(f, root):
            there = _runtime_group(name)
            if there is None or there == here or there not in level:
                continue
            if level[there] >= level[here]:
                out.append(f"{f.relative_to(root)} imports {name} ({here} < {there})")
    return out


def test_the_runtime_imports_only_down_its_own_order() -> None:
    groups = set(_levels())
    assert {"host", "interposers", "faults", "attempt", "events"} <= groups
    assert runtime_order_violations() == []


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("runner/runtime/interposers/planted.py", "from runner.runtime.attempt import triggers\n"),
        ("runner/runtime/interposers/modelproxy/planted.py", "from ...faults import base\n"),
        ("runner/runtime/host/planted.py", "import runner.runtime.sandbox.podman\n"),
        ("runner/runtime/faults/planted.py", "from ..attempt.run import run_attempt\n"),
        ("runner/runtime/sandbox/planted.py", "from runner.runtime.events import Directive\n"),
        ("runner/runtime/attempt/planted.py", "from runner.runtime.workload import Workload\n"),
        ("runner/runtime/cellselect.py", "from runner.runtime import executor\n"),  # one level
        ("runner/runtime/planted.py", "X = 1\n"),  # not placed in the order
        ("runner/runtime/planted/__init__.py", ""),
    ],
)
def test_a_planted_climb_in_the_runtime_is_caught(tmp_path: Path, where: str, text: str) -> None:
    import shutil

    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    target = tmp_path / where
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as f:  # appended: an existing module gains one bad import
        f.write(text)
    found = runtime_order_violations(tmp_path)
    top = "/".join(where.split("/")[:3]).removesuffix(".py")
    assert len(found) >= 1 and all(f.startswith(top) for f in found), found


def test_a_planted_cycle_in_the_runtime_is_caught(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    host = tmp_path / "runner" / "runtime" / "host"
    (host / "planted_a.py").write_text("from runner.runtime.host import planted_b\n")
    (host / "planted_b.py").write_text("from . import planted_a\n")
    # the one cycle finder (test_import_cycles.py; the whole tree has none, a test there)
    from tests.foundation.test_import_cycles import cycles, graph

    found = cycles(graph(tmp_path))
    planted = {"runner.runtime.host.planted_a", "runner.runtime.host.planted_b"}
    assert len(found) == 1 and planted <= set(found[0]), found


# The evaluator's stages, lowest first: a module imports only its own stage and those below it.
# environment sits below verdict: eligibility runs the conformance stage itself (no hook).
EVALUATOR = "runner.evaluator"
EVALUATOR_ORDER = ("core", "protocol", "evidence", "environment", "verdict", "publish", "trust")


def stage_of(module: str) -> int | None:
    """A module's stage index in EVALUATOR_ORDER (None: not inside a stage, e.g. schemas.py)."""
    parts = module.split(".")
    if parts[:2] != EVALUATOR.split(".") or len(parts) < 3 or parts[2] not in EVALUATOR_ORDER:
        return None
    return EVALUATOR_ORDER.index(parts[2])


def evaluator_climbs(root: Path = ROOT) -> list[str]:
    out = []
    for f in sorted(root.joinpath(*EVALUATOR.split(".")).rglob("*.py")):
        here = stage_of(module_name(f, root))
        if here is None:
            continue
        for name in imports_of(f, root):
            there = stage_of(name)
            if there is not None and there > here:
                out.append(f"{f.relative_to(root)} imports {name}")
    return out


def test_evaluator_stages_import_only_downwards() -> None:
    folder = ROOT / "runner" / "evaluator"
    assert {p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        EVALUATOR_ORDER
    )  # a new stage is placed in the order, not left unchecked
    assert evaluator_climbs() == []


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("runner/evaluator/core/planted.py", "from runner.evaluator.protocol import spec\n"),
        ("runner/evaluator/evidence/planted.py", "from ..verdict.outcomes import TerminalRecord\n"),
        ("runner/evaluator/verdict/planted.py", "import runner.evaluator.publish.results\n"),
        ("runner/evaluator/environment/planted.py", "from runner.evaluator import verdict\n"),
        ("runner/evaluator/publish/planted.py", "from runner.evaluator.trust import bundle\n"),
    ],
)
def test_a_planted_climb_between_evaluator_stages_is_caught(
    tmp_path: Path, where: str, line: str
) -> None:
    import shutil

    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    assert evaluator_climbs(tmp_path) == []
    (tmp_path / where).write_text(line)
    found = evaluator_climbs(tmp_path)
    assert len(found) >= 1 and all(f.startswith(where) for f in found), found


def test_every_evaluator_file_is_a_declared_input() -> None:
    decl = load_declaration(ROOT)
    assert "runner/evaluator" in decl.paths
    assert "witnesses" in decl.paths and "schemas" in decl.paths and "uv.lock" in decl.paths
