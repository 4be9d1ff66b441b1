"""docs/ARCHITECTURE.md says what is where: the claims a test can check are checked (issue 24).

- *Modules → tests* (the table at the end): every module, package or test path it names exists,
  and every module of `runner/` is named there (itself, or a folder or glob holding it). In the
  first column names are relative to `runner/` (a leading `runner/` is allowed); a bare name is a
  sibling of the name before it in the same cell (`evaluator/protocol/spec`, `specload`);
  parenthesised text is commentary. In the second column a bare `*.py` name lies in the folder of
  the path before it (`tests/foundation/test_errors.py`, `test_invariants.py`).
- *Where things are*: every module a folder row names exists in that folder, and every module of
  the folder is named (the fault folder's kind modules, "one module per kind", excepted); the
  rows of `runner/evaluator/` and `runner/runtime/` together cover each of their entries.
- The layer drawing names every top-level entry of `runner/`, and each exists.
- Every repository path written in backticks anywhere in the document exists.
- `evaluator_digest`'s inputs are the ones the document lists; the report renderer imports only
  the evaluator, as it says.
- "A new fault kind edits no existing module": no runtime module but the kind's own names it.

Negative tests run the checkers on a planted document or tree.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import load_declaration

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
TICKED = re.compile(r"`([^`]+)`")
PATHLIKE = re.compile(r"[\w./*-]+")
IDENT = re.compile(r"[A-Za-z_][\w]*\*?")
TOP = ("runner/", "tests/", "docs/", "specs/", "images/", "nix/", "subjects/", "keys/")
TOP += ("vectors/", "scripts/", "witnesses/", "schemas/", "registry/")


# --- reading the document ----------------------------------------------------------------


def section(text: str, title: str) -> str:
    """The body under the heading whose text starts with `title`, up to the next heading of its
    level or above."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(#+) (.*)", line)
        if m and m[2].startswith(title):
            level = len(m[1])
            body = []
            for nxt in lines[i + 1 :]:
                h = re.match(r"(#+) ", nxt)
                if h and len(h[1]) <= level:
                    break
                body.append(nxt)
            return "\n".join(body)
    raise AssertionError(f"no heading {title!r} in the document")


def rows(body: str) -> list[list[str]]:
    """A Markdown table's body rows (header and rule dropped), cells stripped."""
    out = []
    for line in body.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(set(c) <= set("-: ") for c in cells):
            continue
        out.append(cells)
    return out[1:]  # the header


def strip_parens(cell: str) -> str:
    out, depth = [], 0
    for ch in cell:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _match(base: Path, name: str) -> list[Path]:
    if "*" in name:
        return sorted(base.glob(name.rstrip("/")))
    for cand in (base / name, base / f"{name}.py"):
        if cand.exists():
            return [cand]
    return []


def _folder(found: list[Path], name: str) -> Path:
    p = found[0]
    return p if p.is_dir() and "*" not in name else p.parent


def module_cell(cell: str, root: Path) -> Iterator[tuple[str, list[Path]]]:
    """(name, what it names) for each runner path in a first-column cell; [] if it is missing."""
    folder: Path | None = None
    for tok in TICKED.findall(strip_parens(cell)):
        if not PATHLIKE.fullmatch(tok):
            continue  # prose: `bench plan`, `--only`
        name = tok.removeprefix("runner/")
        if "/" in name or tok.startswith("runner/"):
            found = _match(root / "runner", name) or _match(root, tok)
        elif folder is not None and (IDENT.fullmatch(name) or name.endswith(".py")):
            found = _match(folder, name)
        elif name.endswith(".py"):
            found = _match(root / "runner", name)
        elif "." in name:
            found = _match(root, name)  # a repository file: flake.nix
        else:
            continue  # an identifier with no module before it: `fault_id`
        yield tok, found
        if found:
            folder = _folder(found, name)


def test_cell(cell: str, root: Path) -> Iterator[tuple[str, list[Path]]]:
    """(name, what it names) for each path in a second-column cell."""
    folder: Path | None = None
    for tok in TICKED.findall(cell):
        if not PATHLIKE.fullmatch(tok) or not ("/" in tok or tok.endswith(".py")):
            continue  # `AFB_REQUIRE_REAL=1`, `optional:`
        if "/" in tok:
            found = _match(root, tok)
        elif folder is not None:
            found = _match(folder, tok)
        else:
            found = []  # a bare name with no folder before it says nothing
        yield tok, found
        if found and tok.startswith("tests/"):
            folder = _folder(found, tok)


test_cell.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def _pyfiles(p: Path) -> set[Path]:
    if p.is_dir():
        return {f for f in p.rglob("*.py") if "__pycache__" not in f.parts}
    return {p} if p.suffix == ".py" else set()


def _has_code(init: Path) -> bool:
    body = ast.parse(init.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return bool(body)


def runner_modules(root: Path) -> set[Path]:
    """Every module of runner/ that holds something (an __init__.py with only a docstring does
    not)."""
    return {
        f
        for f in _pyfiles(root / "runner")
        if f.name != "__init__.py" or (_has_code(f) and f.parent != root / "runner")
    }


def table_problems(text: str, root: Path) -> list[str]:
    table = rows(section(text, "Modules → tests"))
    problems: list[str] = []
    covered: set[Path] = set()
    for cells in table:
        if len(cells) != 2:
            problems.append(f"row without two cells: {cells}")
            continue
        for name, found in module_cell(cells[0], root):
            if not found:
                problems.append(f"module {name!r} (row {cells[0][:40]!r}) does not exist")
            for p in found:
                covered |= _pyfiles(p)
        tests = list(test_cell(cells[1], root))
        if not tests:
            problems.append(f"row {cells[0][:40]!r} names no test path")
        for name, found in tests:
            if not found:
                problems.append(f"test path {name!r} (row {cells[0][:40]!r}) does not exist")
    for f in sorted(runner_modules(root) - covered):
        problems.append(f"{f.relative_to(root)} is in no row of the table")
    return problems


# --- the table ---------------------------------------------------------------------------


def test_the_modules_to_tests_table_is_true() -> None:
    text = DOC.read_text()
    assert len(rows(section(text, "Modules → tests"))) > 30
    assert table_problems(text, ROOT) == []


def _mutated(old: str, new: str) -> str:
    text = DOC.read_text()
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("| `evaluator/core/*`, ", "| `evaluator/core/*`, `evaluator/nowhere`, ", "nowhere"),
        ("`evaluator/protocol/spec`, `specload`", "`evaluator/protocol/spec`, `specl`", "specl"),
        (  # the bare names after it lose their folder too: all in that row
            "`tests/foundation/test_canonical.py`",
            "`tests/foundation/test_canon.py`",
            "row '`evaluator/core/*`",
        ),
        ("`test_evaluator_digest.py`", "`test_evaluator_digests.py`", "digests"),
        ("| `runtime/sandbox/*` (", "| `runtime/sandbox/podman` (", "runner/runtime/sandbox/"),
    ],
    ids=["missing-module", "missing-sibling", "missing-test", "missing-bare-test", "uncovered"],
)
def test_a_wrong_table_is_caught(old: str, new: str, expected: str) -> None:
    problems = table_problems(_mutated(old, new), ROOT)
    assert len(problems) >= 1 and all(expected in p for p in problems), problems


def test_a_new_module_missing_from_the_table_is_caught(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    for other in ("tests", "vectors", "subjects", "flake.nix"):  # read only: linked
        (tmp_path / other).symlink_to(ROOT / other)
    assert table_problems(DOC.read_text(), tmp_path) == []
    (tmp_path / "runner/evaluator/publish/planted.py").write_text("X = 1\n")
    assert table_problems(DOC.read_text(), tmp_path) == [
        "runner/evaluator/publish/planted.py is in no row of the table"
    ]


# --- where things are --------------------------------------------------------------------


def folder_problems(text: str, root: Path, heading: str, base: str) -> list[str]:
    problems: list[str] = []
    named_entries: set[Path] = set()
    where = root / base
    for cells in rows(section(text, heading)):
        firsts = [t for t in TICKED.findall(cells[0]) if PATHLIKE.fullmatch(t)]
        if len(firsts) == 1 and firsts[0].endswith("/"):
            folder = where / firsts[0]
            named_entries.add(folder)
            if not folder.is_dir():
                problems.append(f"{base}{firsts[0]} is not a folder")
                continue
            named: set[Path] = set()
            for tok in TICKED.findall(strip_parens(cells[1])):
                if not PATHLIKE.fullmatch(tok):
                    continue
                if "/" in tok and not tok.endswith("/"):
                    if not _match(root, tok):
                        problems.append(f"{tok} (row {base}{firsts[0]}) does not exist")
                    continue
                found = _match(folder, tok)
                if not found:
                    problems.append(f"{base}{firsts[0]}{tok} does not exist")
                named |= set(found)
            for entry in sorted(folder.iterdir()):
                if entry.name in ("__init__.py", "__pycache__") or entry in named:
                    continue
                if entry.suffix not in (".py", "") and not entry.is_dir():
                    continue  # data files (templates, TOML) need not be listed
                if _is_fault_kind(entry):
                    continue  # "one module per kind"
                problems.append(f"{entry.relative_to(root)} is not named in its folder's row")
        else:
            for tok in firsts:
                found = _match(where, tok)
                if not found:
                    problems.append(f"{base}{tok} does not exist")
                named_entries |= set(found)
    for entry in sorted(where.iterdir()):
        if entry.name in ("__init__.py", "__pycache__") or entry in named_entries:
            continue
        if entry.suffix == ".py" or (entry.is_dir() and (entry / "__init__.py").exists()):
            problems.append(f"{entry.relative_to(root)} has no row under {heading!r}")
    return problems


def _is_fault_kind(entry: Path) -> bool:
    if entry.parent.name != "faults" or entry.suffix != ".py":
        return False
    return "register(FaultKindPlugin(" in entry.read_text().replace("\n", "").replace(" ", "")


WHERE = [("`runner/evaluator/`", "runner/evaluator/"), ("`runner/runtime/`", "runner/runtime/")]


@pytest.mark.parametrize(("heading", "base"), WHERE)
def test_where_things_are_is_true(heading: str, base: str) -> None:
    text = DOC.read_text()
    assert len(rows(section(text, heading))) >= 6
    assert folder_problems(text, ROOT, heading, base) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("`bounded` (every read", "`boundedx` (every read", "core/boundedx does not exist"),
        ("`records` (journal record types", "`recs` (journal record types", "records.py is not"),
        ("| `envcollect.py`, `selftest.py` |", "| `envcollect.py` |", "selftest.py has no row"),
    ],
)
def test_a_wrong_folder_row_is_caught(old: str, new: str, expected: str) -> None:
    text = _mutated(old, new)
    problems = [p for h, b in WHERE for p in folder_problems(text, ROOT, h, b)]
    assert problems and any(expected in p for p in problems), problems


# --- the drawing, the paths, the claims ---------------------------------------------------


def drawing_problems(text: str, root: Path) -> list[str]:
    block = section(text, "The one rule").split("```")[1]
    named = set(re.findall(r"^(runner/[\w.]+/?)", block, re.M))
    problems = [f"{n} does not exist" for n in sorted(named) if not (root / n).exists()]
    for entry in sorted((root / "runner").iterdir()):
        if entry.name in ("__init__.py", "__pycache__"):
            continue
        if f"runner/{entry.name}{'/' if entry.is_dir() else ''}" not in named:
            problems.append(f"runner/{entry.name} is not in the layer drawing")
    return problems


def test_the_layer_drawing_names_every_top_level_entry() -> None:
    assert drawing_problems(DOC.read_text(), ROOT) == []


def test_a_missing_layer_is_caught() -> None:
    text = _mutated("runner/history.py  ", "runner/histories.py")
    assert drawing_problems(text, ROOT) == [
        "runner/histories.py does not exist",
        "runner/history.py is not in the layer drawing",
    ]


def path_problems(text: str, root: Path) -> list[str]:
    problems = []
    for tok in sorted(set(TICKED.findall(text))):
        if not tok.startswith(TOP) or not PATHLIKE.fullmatch(tok):
            continue  # `specs/<name>.freeze.jsonl`: a pattern, not a path
        if not _match(root, tok):
            problems.append(f"`{tok}` does not exist")
    return problems


def test_every_repository_path_in_the_document_exists() -> None:
    assert path_problems(DOC.read_text(), ROOT) == []
    assert path_problems("see `runner/runtime/nowhere.py` and `tests/x/*.py`", ROOT) == [
        "`runner/runtime/nowhere.py` does not exist",
        "`tests/x/*.py` does not exist",
    ]


def listed_inputs(text: str) -> set[str]:
    """The paths the document says `evaluator_digest` covers (the parenthesis after the claim)."""
    intro = section(text, "The one rule").split("```")[0]
    start = intro.index("evaluator_digest` (")
    start = intro.index("paths:", start) + len("paths:")
    depth, end = 0, start
    for end in range(start, len(intro)):
        depth += {"(": 1, ")": -1}.get(intro[end], 0)
        if depth < 0:
            break
    return {t.rstrip("/") for t in TICKED.findall(strip_parens(intro[start:end]))}


def test_the_evaluator_inputs_are_the_ones_listed() -> None:
    assert listed_inputs(DOC.read_text()) == set(load_declaration(ROOT).paths)
    assert listed_inputs(_mutated("`witnesses/`, `uv.lock`)", "`uv.lock`)")) == set(
        load_declaration(ROOT).paths
    ) - {"witnesses"}


def test_the_report_renderer_imports_only_the_evaluator() -> None:
    from tests.foundation.test_layering import imports_of

    bad = [
        f"{f.relative_to(ROOT)} imports {n}"
        for f in sorted((ROOT / "runner" / "report").rglob("*.py"))
        for n in imports_of(f)
        if n.startswith("runner")
        and not n.startswith(("runner.evaluator", "runner.report"))
        and n != "runner"
    ]
    assert bad == []


def kind_names(root: Path) -> dict[Path, set[str]]:
    """Each fault-kind module -> the names that mean its kind: the constants it imports from
    faultkinds, their string values, the module's own dotted name."""
    faultkinds = root / "runner/evaluator/protocol/faultkinds.py"
    values = {
        n.targets[0].id: n.value.value
        for n in ast.parse(faultkinds.read_text()).body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
    }
    out: dict[Path, set[str]] = {}
    for k in sorted((root / "runner/runtime/faults").glob("*.py")):
        if not _is_fault_kind(k):
            continue
        consts = {
            a.name
            for n in ast.walk(ast.parse(k.read_text()))
            if isinstance(n, ast.ImportFrom) and n.module == "runner.evaluator.protocol.faultkinds"
            for a in n.names
        }
        out[k] = {*consts, *(values[c] for c in consts if c in values), k.stem}
    return out


def kind_problems(root: Path) -> list[str]:
    kinds = kind_names(root)
    faults = root / "runner/runtime/faults"
    bad = []
    for f in sorted((root / "runner/runtime").rglob("*.py")):
        if f in kinds or (f.parent == faults and f.stem in ("registry", "base", "__init__")):
            continue
        tree = ast.parse(f.read_text())
        used: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                used |= {a.name for a in n.names} | {(n.module or "").rpartition(".")[2]}
            elif isinstance(n, ast.Import):
                used |= {a.name.rpartition(".")[2] for a in n.names}
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                used.add(n.value)
        for k, names in kinds.items():
            if used & names:
                bad.append(f"{f.relative_to(root)} names {k.stem}: {sorted(used & names)}")
    return bad


def test_no_runtime_module_names_a_fault_kind_but_its_own() -> None:
    assert len(kind_names(ROOT)) >= 4
    assert kind_problems(ROOT) == []


def test_a_module_naming_a_kind_is_caught(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "runner", tmp_path / "runner", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = set(kind_problems(tmp_path))
    (tmp_path / "runner/runtime/planted.py").write_text(
        "from runner.evaluator.protocol.faultkinds import SANDBOX_RESTART\n"
    )
    (tmp_path / "runner/runtime/host/planted2.py").write_text("KIND = 'sigkill_mid_tool_call'\n")
    (tmp_path / "runner/runtime/host/planted3.py").write_text(
        "from runner.runtime.faults import freeze_mid_tool_call\n"
    )
    assert set(kind_problems(tmp_path)) - before == {
        "runner/runtime/planted.py names sandbox_restart: ['SANDBOX_RESTART']",
        "runner/runtime/host/planted2.py names sigkill: ['sigkill_mid_tool_call']",
        "runner/runtime/host/planted3.py names freeze_mid_tool_call: ['freeze_mid_tool_call']",
    }
