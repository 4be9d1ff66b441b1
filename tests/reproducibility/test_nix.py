"""The evaluator digest is derivable with or without Nix, from one declaration of its inputs.

Nix here cannot fetch nixpkgs, so the flake's outputs are not built; what is tested is what can
be: the flake parses, its evaluator-input selection (nix/evaluator-inputs.nix, builtins only)
copies exactly the bytes the Python digest covers, and `nix hash path` agrees with the Python
NAR implementation on trees with executable files and symlinks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import evaluator_digest, export_inputs, load_declaration
from runner.evaluator.core.nar import nar_sha256

ROOT = Path(__file__).resolve().parents[2]


def _nix_problem() -> str | None:
    """Why nix cannot evaluate here (not installed, or a store this user cannot open), or None."""
    if shutil.which("nix-instantiate") is None:
        return "nix not installed"
    probe = subprocess.run(["nix-instantiate", "--eval", "-E", "1"], capture_output=True,
                           text=True, timeout=120, check=False)  # fmt: skip
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"nix cannot evaluate as this user (a non-root user without a nix daemon): {last}"
    return None


NIX_PROBLEM = _nix_problem()
needs_nix = pytest.mark.skipif(NIX_PROBLEM is not None, reason=str(NIX_PROBLEM))


def _nix(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=300).stdout


def _nix_selected(root: Path) -> Path:
    out = _nix(
        "nix-instantiate", "--read-write-mode", "--eval", "--strict", "--json",
        "--arg", "root", str(root), str(ROOT / "nix" / "evaluator-inputs.nix"),
    )  # fmt: skip
    return Path(json.loads(out))


@needs_nix
def test_flake_parses() -> None:
    _nix("nix-instantiate", "--parse", str(ROOT / "flake.nix"))


def test_flake_reads_the_single_declaration() -> None:
    flake = (ROOT / "flake.nix").read_text()
    selector = (ROOT / "nix" / "evaluator-inputs.nix").read_text()
    assert "import ./nix/evaluator-inputs.nix" in flake
    assert 'builtins.readFile (root + "/evaluator-inputs.json")' in selector
    assert "uv2nix" in flake and "loadWorkspace" in flake  # packages built from uv.lock
    # images are read from their own declarations, through the one label computation
    assert "import ./nix/image-inputs.nix { imageDir = ./images/swe-lite-nix; }" in flake
    assert (
        'builtins.readFile (imageDir + "/image.toml")'
        in (ROOT / "nix/image-inputs.nix").read_text()
    )


@needs_nix
def test_flake_selection_equals_python_digest(tmp_path: Path) -> None:
    # Evaluate the flake's own filter on a copy of the checkout (minus bulky dirs), then hash
    # the store path it produced with nix-hash: it must equal the Python digest.
    copy = tmp_path / "checkout"
    shutil.copytree(
        ROOT, copy, symlinks=True,
        ignore=shutil.ignore_patterns(".venv", ".tools", ".git", "runs", "*.pyc", "__pycache__"),
    )  # fmt: skip
    store_path = _nix_selected(copy)
    nar = _nix("nix-hash", "--type", "sha256", str(store_path)).strip()
    assert "sha256:" + nar == evaluator_digest(copy)
    # And the selection holds exactly the declared files, nothing of the runtime.
    selected = {str(p.relative_to(store_path)) for p in store_path.rglob("*") if p.is_file()}
    assert "runner/evaluator/protocol/spec.py" in selected
    assert not any(s.startswith("runner/runtime") or s.startswith("runner/cli") for s in selected)


@needs_nix
def test_nix_hash_path_agrees_with_exec_bits_and_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for pkg in ("evaluator", "report"):
        shutil.copytree(ROOT / "runner" / pkg, root / "runner" / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for rel in ("evaluator-inputs.json", "runner/__init__.py", "uv.lock"):
        shutil.copy2(ROOT / rel, root / rel)
    shutil.copytree(ROOT / "schemas", root / "schemas")
    shutil.copytree(ROOT / "witnesses", root / "witnesses")
    tool = root / "schemas" / "regen.sh"
    tool.write_text("#!/bin/sh\necho regen\n")
    tool.chmod(0o755)
    os.symlink("regen.sh", root / "schemas" / "latest")
    export = tmp_path / "export"
    export_inputs(root, export)
    assert os.access(export / "schemas" / "regen.sh", os.X_OK)
    assert (export / "schemas" / "latest").is_symlink()
    py = evaluator_digest(root)
    nix = _nix("nix", "--extra-experimental-features", "nix-command", "hash", "path",
               "--base16", str(export)).strip()  # fmt: skip
    assert py == "sha256:" + nix == "sha256:" + nar_sha256(export)
    # The exec bit and the symlink are part of the identity.
    tool.chmod(0o644)
    assert evaluator_digest(root) != py
    tool.chmod(0o755)
    os.unlink(root / "schemas" / "latest")
    os.symlink("spec.schema.json", root / "schemas" / "latest")
    assert evaluator_digest(root) != py


def test_runtime_change_leaves_digest_alone_evaluator_change_moves_it(tmp_path: Path) -> None:
    decl = load_declaration(ROOT)
    root = tmp_path / "r"
    export_inputs(ROOT, root)
    (root / "runner" / "runtime").mkdir()
    (root / "runner" / "runtime" / "x.py").write_text("print(1)\n")
    before = evaluator_digest(root)
    (root / "runner" / "runtime" / "x.py").write_text("print(2)\n")
    assert evaluator_digest(root) == before
    target = root / "runner" / "evaluator" / "core" / "canonical.py"
    target.write_bytes(target.read_bytes() + b"\n")
    assert evaluator_digest(root) != before
    assert "runner/evaluator" in decl.paths


@needs_nix
def test_flake_image_label_is_the_python_input_digest_of_its_own_declaration() -> None:
    # The flake's sandbox image is declared as its own image (images/swe-lite-nix): nix computes
    # its input digest (the label and the tag) exactly as runner/imagebuild/builder.py does.
    from runner.imagebuild.builder import image_input_digest, image_tag

    nix_dir = ROOT / "images" / "swe-lite-nix"
    expr = f"import {ROOT / 'nix' / 'image-inputs.nix'} {{ imageDir = {nix_dir}; }}"
    got = json.loads(_nix("nix-instantiate", "--eval", "--strict", "--json", "-E", expr))
    assert got["digest"] == image_input_digest(nix_dir)
    assert f"{got['name']}:{got['tag']}" == image_tag(nix_dir)
    # It is another image than the mmdebstrap one, which the flake's function refuses to label.
    assert got["digest"] != image_input_digest(ROOT / "images" / "swe-lite")
    fn = ROOT / "nix" / "image-inputs.nix"
    bad = f"(import {fn} {{ imageDir = {ROOT}/images/swe-lite; }}).digest"
    proc = subprocess.run(["nix-instantiate", "--eval", "--strict", "-E", bad],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode != 0 and "bench images build" in proc.stderr


def test_the_mmdebstrap_builder_refuses_the_flakes_image(tmp_path: Path) -> None:
    from runner.imagebuild.builder import build_image

    with pytest.raises(ValueError, match="built by the flake"):
        build_image(ROOT / "images" / "swe-lite-nix", load=False, out_dir=tmp_path)
