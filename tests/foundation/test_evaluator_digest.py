"""evaluator_digest: a NAR SHA-256 over exactly the declared inputs, reproducible by Nix."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import evaluator_digest, export_inputs, load_declaration
from runner.evaluator.core.nar import nar_sha256
from tests.foundation.helpers import REPO

NIX_HASH = shutil.which("nix-hash")
needs_nix = pytest.mark.skipif(NIX_HASH is None, reason="nix-hash not on PATH")


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    root = tmp_path / "inputs"
    export_inputs(REPO, root)
    return root


def nix_hash(path: Path) -> str:
    assert NIX_HASH is not None
    out = subprocess.run(
        [NIX_HASH, "--type", "sha256", str(path)], check=True, capture_output=True, text=True
    )
    return "sha256:" + out.stdout.strip()


def test_export_reproduces_the_checkout_digest(exported: Path) -> None:
    # Others may edit the tree while this runs; retry once on a mismatch.
    for _ in range(2):
        if evaluator_digest(exported) == evaluator_digest(REPO):
            break
        shutil.rmtree(exported)
        export_inputs(REPO, exported)
    assert evaluator_digest(exported) == evaluator_digest(REPO)
    assert evaluator_digest(exported).startswith("sha256:")


def test_export_holds_only_declared_inputs(exported: Path) -> None:
    decl = load_declaration(REPO)
    top = {Path(p).parts[0] for p in decl.paths}
    assert {p.name for p in exported.iterdir()} == top
    assert not list(exported.rglob("__pycache__")) and not list(exported.rglob("*.pyc"))


@pytest.mark.parametrize(
    "rel", ["runner/evaluator/canonical.py", "uv.lock", "witnesses/lost_response.json"]
)
def test_changing_an_input_changes_the_digest(exported: Path, rel: str) -> None:
    before = evaluator_digest(exported)
    with (exported / rel).open("ab") as fh:
        fh.write(b" ")
    assert evaluator_digest(exported) != before


def test_exec_bit_and_new_file_change_the_digest(exported: Path) -> None:
    before = evaluator_digest(exported)
    target = exported / "runner" / "evaluator" / "core" / "canonical.py"
    target.chmod(0o755)
    after_chmod = evaluator_digest(exported)
    assert after_chmod != before
    (exported / "runner" / "evaluator" / "new_module.py").write_text("")
    assert evaluator_digest(exported) != after_chmod


def test_files_outside_the_inputs_do_not_change_the_digest(exported: Path) -> None:
    before = evaluator_digest(exported)
    (exported / "README.md").write_text("not an input")
    (exported / "runner" / "runtime").mkdir()
    (exported / "runner" / "runtime" / "x.py").write_text("x = 1")
    (exported / "runner" / "evaluator" / "__pycache__").mkdir()
    (exported / "runner" / "evaluator" / "__pycache__" / "spec.cpython-311.pyc").write_bytes(b"x")
    (exported / "runner" / "evaluator" / "stray.pyc").write_bytes(b"x")
    assert evaluator_digest(exported) == before


def test_declaration_errors(tmp_path: Path) -> None:
    (tmp_path / "evaluator-inputs.json").write_text('{"paths": ["../outside"]}')
    with pytest.raises(InputError, match="not inside the checkout"):
        load_declaration(tmp_path)
    (tmp_path / "evaluator-inputs.json").write_text('{"paths": ["nope"]}')
    with pytest.raises(InputError, match="does not exist"):
        evaluator_digest(tmp_path)
    (tmp_path / "evaluator-inputs.json").write_text("[1]")
    with pytest.raises(InputError, match="JSON object"):
        load_declaration(tmp_path)


@needs_nix
def test_nar_digest_equals_nix_hash_with_exec_and_symlink(exported: Path) -> None:
    tool = exported / "witnesses" / "collect.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    os.symlink("lost_response.json", exported / "witnesses" / "alias")
    (exported / "runner" / "evaluator" / "empty").write_bytes(b"")
    assert evaluator_digest(exported) == nix_hash(exported)


@needs_nix
def test_nar_of_small_tree_equals_nix_hash(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "d" / "e").mkdir(parents=True)
    (root / "a").write_bytes(b"12345678")  # exactly 8 bytes: no padding
    (root / "d" / "b").write_bytes(b"odd")  # padding
    (root / "d" / "e" / "x").write_bytes(b"")
    (root / "run").write_text("#!/bin/sh\n")
    (root / "run").chmod(0o700)
    os.symlink("../a", root / "d" / "link")
    os.symlink("dangling-target", root / "dangling")
    (root / "B").write_text("upper case sorts first")
    assert "sha256:" + nar_sha256(root) == nix_hash(root)
    assert "sha256:" + nar_sha256(root / "a") == nix_hash(root / "a")
