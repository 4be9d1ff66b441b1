"""An agent never sees the answer (issue 23): the hidden paths are masked in the subject's own
mount namespace (real processes, a real netns, the real checkout's specs and evidence).

The subject runs as its own unprivileged uid, and the checkout is world-readable: without the
masks it could read every task's gold.patch, the model's future answers in the cassettes and the
published bundles. The negative control launches the same probe with no masks and sees them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from runner.evaluator.protocol.specload import load_spec
from runner.runtime.attempt.subject import SubjectRegistry, prepare_state_dir, subject_uid
from runner.runtime.executor import git_objects_dir, hidden_paths
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.procs import ProcError, Reaper, SubjectLauncher

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("mask_probe.py")
SPEC = ROOT / "specs" / "swe-lite-agents.toml"


def _targets(hidden: tuple[Path, ...]) -> dict[str, Path]:
    """One of each kind the spec hides: a task's gold patch, a cassette, a published file."""
    task = next(p for p in hidden if (p / "gold.patch").is_file())
    cassettes = next(p for p in hidden if "policies" in p.parts or "cassettes" in p.parts)
    published = ROOT / "vectors" / "published"
    bundle = next(p for p in sorted(published.rglob("*")) if p.is_file())
    return {
        "task_dir": task,
        "gold": task / "gold.patch",
        "tests": task / "tests.patch",
        "cassette_dir": cassettes,
        "cassette": next(p for p in sorted(cassettes.rglob("*")) if p.is_file()),
        "vectors": ROOT / "vectors",
        "published_file": bundle,
        "git": git_objects_dir(ROOT),  # every committed patch is in the git objects
        "spec": SPEC,  # not hidden: the subject still sees the rest of the checkout
    }


def _probe(
    run_id: str, reaper: Reaper, tmp_run_dir: Path, targets: dict[str, Path],
    hidden: tuple[Path, ...],
) -> dict[str, object]:  # fmt: skip
    with AttemptNetwork(run_id) as net:
        uid = subject_uid(net.index)
        state = prepare_state_dir(tmp_run_dir / "state", uid, uid)
        registry = SubjectRegistry(
            SubjectLauncher(run_id, reaper), ["/usr/bin/python3", "-I", str(PROBE)],
            state_dir=state, netns=net.netns, uid=uid, gid=uid, hidden_paths=hidden,
            env={"AFB_TEST_PROBE": json.dumps([str(p) for p in targets.values()])},
        )  # fmt: skip
        s = registry.launch(0)
        status = s.wait(60)
        registry.stop_all()
        out = (state / "stdout.log").read_text()
        assert status.exited and status.exit_code == 0, (out, (state / "stderr.log").read_text())
        report = json.loads(out)
        assert report["uid"] == uid  # really unprivileged: root would see through nothing
        return {k: report["seen"][str(p)] for k, p in targets.items()}


def test_the_subject_sees_none_of_the_hidden_paths(
    run_id: str, reaper: Reaper, tmp_run_dir: Path
) -> None:
    hidden = hidden_paths(load_spec(SPEC), SPEC)
    targets = _targets(hidden)
    # the host (root, and anyone: the checkout is world-readable) reads them
    for name in ("gold", "tests", "cassette", "published_file"):
        assert targets[name].read_bytes(), name
        assert targets[name].stat().st_mode & 0o004, name

    seen = _probe(run_id, reaper, tmp_run_dir, targets, hidden)
    assert seen["task_dir"] == [] and seen["cassette_dir"] == [] and seen["vectors"] == []
    assert seen["git"] == []
    for name in ("gold", "tests", "cassette", "published_file"):
        assert seen[name] == "FileNotFoundError", (name, seen[name])
    assert seen["spec"] == hashlib.sha256(SPEC.read_bytes()).hexdigest()
    # the masks lived in the subject's mount namespace only
    assert (targets["gold"]).is_file() and os.listdir(ROOT / "vectors")


def test_without_masks_the_same_subject_reads_the_answer(
    run_id: str, reaper: Reaper, tmp_run_dir: Path
) -> None:
    """Negative control: the probe can see; only the masks blind it."""
    targets = _targets(hidden_paths(load_spec(SPEC), SPEC))
    seen = _probe(run_id, reaper, tmp_run_dir, targets, ())
    assert seen["gold"] == hashlib.sha256(targets["gold"].read_bytes()).hexdigest()
    assert seen["cassette"] == hashlib.sha256(targets["cassette"].read_bytes()).hexdigest()
    assert isinstance(seen["vectors"], list) and "published" in seen["vectors"]
    assert isinstance(seen["task_dir"], list) and "gold.patch" in seen["task_dir"]
    assert isinstance(seen["git"], list) and "objects" in seen["git"]


def test_the_spec_decides_what_is_hidden() -> None:
    """Every task folder, every subject's cassette folder, the checkout's vectors/ and its git
    objects."""
    spec = load_spec(SPEC)
    hidden = set(hidden_paths(spec, SPEC))
    base = SPEC.parent
    tasks = {(base / t.path).resolve() for _, t in spec.task_index().values() if t.path}
    assert tasks and tasks <= hidden
    models = [s.config.get("model") for s in spec.subjects]
    cassettes = {
        (base / str(m["cassettes"])).resolve()
        for m in models
        if isinstance(m, dict) and "cassettes" in m
    }
    assert cassettes and cassettes <= hidden
    assert (ROOT / "vectors").resolve() in hidden
    git = git_objects_dir(ROOT)
    assert git is not None and git in hidden
    assert hidden == tasks | cassettes | {(ROOT / "vectors").resolve(), git}


def test_a_worktree_masks_the_repositorys_git_objects(tmp_path: Path) -> None:
    """In a worktree `.git` is a file (a tmpfs cannot cover a file): its common dir is masked."""
    repo = tmp_path / "repo" / ".git"
    (repo / "worktrees" / "wt").mkdir(parents=True)
    (repo / "objects").mkdir()
    (repo / "worktrees" / "wt" / "commondir").write_text("../..\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {repo / 'worktrees' / 'wt'}\n")
    assert git_objects_dir(wt) == repo.resolve()
    assert git_objects_dir(tmp_path / "repo") == repo
    assert git_objects_dir(tmp_path) is None


def test_a_mask_that_fails_fails_the_launch(run_id: str, reaper: Reaper, tmp_run_dir: Path) -> None:
    """A tmpfs cannot be mounted over a regular file: the launch is a ProcError (a harness
    error), never a subject running with the path visible; a missing path is skipped."""
    target = tmp_run_dir / "not-a-dir"
    target.write_text("answer")
    with AttemptNetwork(run_id) as net:
        launcher = SubjectLauncher(run_id, reaper)
        with pytest.raises(ProcError, match="masks over hidden paths failed"):
            launcher.launch(
                ["/bin/sh", "-c", "echo RAN > ran"], state_dir=tmp_run_dir / "a",
                netns=net.netns, masks=[tmp_run_dir / "missing", target],
            )  # fmt: skip
        assert not (tmp_run_dir / "a" / "ran").exists()
        assert "cannot mask" in (tmp_run_dir / "a" / "stderr.log").read_text()
        # a missing path alone is nothing to hide: the subject runs, as the launched pid itself
        s = launcher.launch(
            ["/bin/sleep", "30"], state_dir=tmp_run_dir / "b", netns=net.netns,
            masks=[tmp_run_dir / "missing"],
        )  # fmt: skip
        try:
            cmdline = Path(f"/proc/{s.pid}/cmdline")
            deadline = time.monotonic() + 10  # ip, env, sh exec in place: the same pid
            while cmdline.read_bytes() != b"/bin/sleep\x0030\x00":
                assert time.monotonic() < deadline, cmdline.read_bytes()
                time.sleep(0.02)
        finally:
            s.kill()
            s.wait(10)
            s.close()
    with pytest.raises(ProcError, match="need a netns"):
        SubjectLauncher(run_id, reaper).launch(
            ["/bin/true"], state_dir=tmp_run_dir / "c", masks=[target]
        )
