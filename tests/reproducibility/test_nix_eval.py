"""The flake evaluates: `nix flake show`, `nix flake check --no-build`, the app's program path.

nixpkgs cannot be fetched here, so this runs the development tool `nix-eval` (real
pyproject.nix, uv2nix, build-system-pkgs and nixpkgs `lib` sources plus a stand-in for the rest
of nixpkgs; its README says what that can and cannot catch) against this checkout's committed
HEAD. The tool lives outside the repository: the test takes its folder from AFB_NIX_EVAL, which
`.ci/run` sets, and is skipped with that reason when it is unset (a user's clone has no tool).
Evaluation only: whether the outputs *build* needs a networked machine (README, "Nix").
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = os.environ.get("AFB_NIX_EVAL")

pytestmark = pytest.mark.skipif(
    not TOOL, reason="optional: AFB_NIX_EVAL is unset: the dev-only nix-eval tool is not available"
)

# Every check the tool reports on this flake must pass; a new FAIL line fails the test.
EXPECTED_PASSES = (
    "every input URL pins a revision",
    "nix flake show",
    "nix flake check --no-build",
    "bench wrapper: every bare exec target is on its PATH",
    "sandbox-image: created=",
    "evaluator-image: created=",
)


@pytest.fixture(scope="module")
def report() -> str:
    assert TOOL is not None
    if shutil.which("nix") is None:
        pytest.fail("nix is not installed (scripts/setup.sh installs nix-bin)")
    if subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "flake.nix", "nix"],
                      capture_output=True, text=True, check=True).stdout.strip():  # fmt: skip
        pytest.fail("flake.nix or nix/ has uncommitted changes: the tool evaluates HEAD")
    proc = subprocess.run(
        ["bash", str(Path(TOOL) / "run.sh"), str(ROOT)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_no_check_fails(report: str) -> None:
    fails = [line for line in report.splitlines() if line.startswith("FAIL")]
    assert fails == [], "\n".join(fails)


@pytest.mark.parametrize("check", EXPECTED_PASSES)
def test_check_passes(report: str, check: str) -> None:
    passes = [line for line in report.splitlines() if line.startswith("PASS")]
    assert any(check in line for line in passes), f"no PASS for {check!r}:\n{report[-3000:]}"


def test_every_output_evaluates(report: str) -> None:
    lines = [ln for ln in report.splitlines() if ln.startswith(("apps.", "packages.", "checks."))]
    assert len(lines) >= 7, report[-3000:]
    for ln in lines:
        assert "/nix/store/" in ln and "error:" not in ln, ln
    program = next(ln for ln in lines if ln.startswith("apps.bench.program"))
    assert program.rstrip().endswith("/bin/bench"), program


def test_evaluator_inputs_selection_equals_python_digest(report: str) -> None:
    # The tool's own Python comparison predates this layout; compare here instead.
    from runner.evaluator.core.inputs import evaluator_digest

    nar = next(ln for ln in report.splitlines() if "nix hash path (NAR sha256) =" in ln)
    committed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", *_inputs()],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if committed:
        pytest.fail(
            f"evaluator inputs have uncommitted changes (the tool hashes HEAD):\n{committed}"
        )
    assert nar.split("= ", 1)[1].strip() == evaluator_digest()


def _inputs() -> list[str]:
    from runner.evaluator.core.inputs import load_declaration

    return list(load_declaration(ROOT).paths)
