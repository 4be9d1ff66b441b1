"""Replicates on a real run (issue 25): `[matrix] replicates = 2` runs every cell twice, in its
own slot with the same schedule, and deterministic subjects show no verdict flip across their
replicates. A flip here is a harness fault, not a subject's.

The smoke spec cut to its baseline and lost-response cells and two reference subjects, copied
with its task into a temporary folder and frozen there (its freeze log stays there too).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.runtime, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"
TASK = "cachetools-cached-info"


def _spec(d: Path) -> Path:
    (d / "swe-lite").mkdir()
    shutil.copytree(ROOT / "specs" / "swe-lite" / TASK, d / "swe-lite" / TASK)
    shutil.copy(ROOT / "specs" / "swe-lite" / "sources.toml", d / "swe-lite" / "sources.toml")
    text = SMOKE.read_text().replace('id = "swe-lite-smoke"', 'id = "swe-lite-replicates"', 1)
    for sub in ("checkpoint", "idempotency-key"):
        text = re.sub(rf'\[\[subjects\]\]\nid = "{sub}"\nagent = "[^"]+"\nconfig = {{[^}}]*}}\n\n',
                      "", text)  # fmt: skip
    for fault in ("sigkill-after-submit-effect", "partition-during-submit", "restart-after-edits"):
        text = re.sub(rf'(#[^\n]*\n)*\[\[faults\]\]\nid = "{fault}"\n(?:[^\[\n#][^\n]*\n)*\n?',
                      "", text)  # fmt: skip
    assert text.count("[[subjects]]") == 2 and text.count("[[faults]]") == 1, text
    text = text.replace("seeds = [1]\n", "seeds = [1]\nreplicates = 2\n", 1)
    spec = d / "replicates.toml"
    spec.write_text(text)
    return spec


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner.cli.main", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip


def test_deterministic_subjects_never_flip_across_replicates(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    plan = json.loads(_bench("plan", "--json", str(spec)).stdout)
    assert plan["cells"] == 8  # 2 slots x 2 replicates x 2 subjects
    assert _bench("freeze", str(spec)).returncode == 0
    out = tmp_path / "runs"
    proc = _bench("run", str(spec), "--out", str(out), "--jobs", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    slots = json.loads((run_dir / "protocol.json").read_text())["slots"]
    assert sorted(s.get("replicate", 0) for s in slots) == [0, 0, 1, 1]
    for subject, duplicates in (("blind-retry", 1), ("intent-reconcile", 0)):
        card = json.loads((run_dir / "results" / subject / "scorecard.json").read_text())
        rep = card["replicates"]
        assert rep["replicates"] == 2 and rep["groups"] == 2
        assert rep["flipped"]["numerator"] == 0 and rep["verdict_variance_mean"] == 0
        # blind retry duplicates under lost response in both replicates: pass^2 is 1/2
        assert rep["pass_all"]["numerator"] == 2 - duplicates
    comparison = json.loads((run_dir / "results" / "comparison.json").read_text())
    assert comparison["paired"][0]["tests"]
