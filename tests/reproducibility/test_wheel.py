"""`bench` installed as a wheel (how uv2nix installs it) finds its project data through AFB_ROOT.

The wheel is built from a snapshot of this checkout (so concurrent edits cannot split the code that
runs from the data it reads), installed with uv.lock's versions into a fresh venv, and run from
outside any checkout: without AFB_ROOT it names what is missing; with AFB_ROOT it plans swe-lite,
evaluates and reproduces a bundle byte for byte, reproduces a published bundle with that bundle's
own evaluator (git history of the snapshot), and refuses a root whose evaluator is other code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.evaluator.core.inputs import ROOT_ENV, evaluator_digest
from runner.history import uv_binary
from tests.evidence.synth import Run

ROOT = Path(__file__).resolve().parents[2]
UV = uv_binary(ROOT)
SKIP = (".venv", ".tools", "runs", "__pycache__", ".mypy_cache", ".ruff_cache", ".hypothesis")

pytestmark = [pytest.mark.slow, pytest.mark.uv]  # no uv: skipped, named (tests/conftest.py)


def _run(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel venv's bench, the snapshot it was built from)."""
    assert UV is not None
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(*SKIP))
    for step in (
        [UV, "build", "-q", "--wheel", "-o", str(tmp / "dist"), str(src)],
        [UV, "export", "-q", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project",
         "--project", str(src), "-o", str(tmp / "requirements.txt")],
        [UV, "venv", "-q", str(tmp / "venv"), "-p", sys.executable],
    ):  # fmt: skip
        proc = _run(*step, cwd=tmp)
        assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp / "dist").glob("*.whl")
    env = {**os.environ, "VIRTUAL_ENV": str(tmp / "venv")}
    proc = _run(UV, "pip", "install", "-q", "-r", str(tmp / "requirements.txt"), str(wheel),
                cwd=tmp, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bench = tmp / "venv" / "bin" / "bench"
    assert bench.is_file()
    return bench, src


def _env(root: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ROOT_ENV, "VIRTUAL_ENV", "PYTHONPATH")}
    if root is not None:
        env[ROOT_ENV] = str(root)
    env["AFB_UV"] = str(UV)  # an older evaluator with another uv.lock runs through `uv run`
    return env


def test_without_afb_root_it_says_what_is_missing(installed: tuple[Path, Path]) -> None:
    bench, src = installed
    proc = _run(str(bench), "plan", str(src / "specs" / "swe-lite.toml"), cwd=bench.parent,
                env=_env(None))  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "installed without its project data" in proc.stderr and ROOT_ENV in proc.stderr


def test_with_afb_root_it_plans_swe_lite(installed: tuple[Path, Path]) -> None:
    bench, src = installed
    proc = _run(str(bench), "plan", str(src / "specs" / "swe-lite.toml"), cwd=bench.parent,
                env=_env(src))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "subject_config_hash" in proc.stdout


def test_with_afb_root_it_evaluates_and_reproduces_a_bundle(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    bench, src = installed
    r = Run(tmp_path / "bundle", evaluator=evaluator_digest(src))
    r.fill("a", lambda i, s: "completed")
    r.fill("b", lambda i, s: "duplicate" if i % 3 == 0 else "completed")
    # The results are derived by the wheel's own evaluator (its library: `bench evaluate` also
    # writes derived views that are not part of the results).
    derive = (
        "import sys; from pathlib import Path; from runner.evaluator.core.inputs import "
        "evaluator_digest; from runner.evaluator.publish.results import derive, write_results; "
        "d = Path(sys.argv[1]); write_results(d, derive(d, evaluator_digest())[2])"
    )
    python = str(bench.parent / "python")
    made = _run(python, "-c", derive, str(r.run_dir), cwd=tmp_path, env=_env(src))
    assert made.returncode == 0, made.stdout + made.stderr
    # derived by hand above, not signed: the wheel's reproduction is the point here
    again = _run(str(bench), "reproduce", "--allow-unsigned", str(r.run_dir), cwd=tmp_path,
                 env=_env(src))  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "REPRODUCED" in again.stdout and "is this checkout's" in again.stdout


def test_with_afb_root_it_reproduces_a_published_bundle_with_its_own_evaluator(
    installed: tuple[Path, Path],
) -> None:
    bench, src = installed
    if shutil.which("git") is None or not (src / ".git").exists():
        pytest.skip("no git history in this checkout")
    bundle = sorted((src / "vectors" / "published").iterdir())[0]
    proc = _run(str(bench), "reproduce", "--evaluator-from-history", str(bundle),
                cwd=bench.parent, env=_env(src))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REPRODUCED" in proc.stdout


def test_a_root_holding_other_evaluator_code_is_refused(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    bench, src = installed
    other = tmp_path / "other"
    shutil.copytree(src, other, symlinks=True, ignore=shutil.ignore_patterns(".git", "vectors"))
    target = other / "runner" / "evaluator" / "core" / "canonical.py"
    target.write_bytes(target.read_bytes() + b"\n# another evaluator\n")
    proc = _run(str(bench), "plan", str(other / "specs" / "swe-lite.toml"), cwd=tmp_path,
                env=_env(other))  # fmt: skip
    assert proc.returncode == 2 and "evaluator_digest would describe other code" in proc.stderr
