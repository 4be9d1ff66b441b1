"""`bench tasks check --sandbox NAME`: the same check as on the host, inside a sandbox of the
swe-lite image, so a task is known to fail without its fix and pass with it under the Python and
pytest that grade it (the image's, not the host's).

Each task gets a fresh sandbox of the run's backend (per-run names: `bench sweep` removes what a
crashed check leaves), its pinned sdist extracted on the host and copied in as one tar under
SCRATCH (the image's own copy under /opt/swe-lite/src is not used: what is checked is the pinned
source, so a task not yet baked into the image is checked too), then `grade.check_task` with an
exec function that runs in that sandbox. Not grader code: nothing here decides a published grade.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from runner.benchmarks.swe_lite.grade import ExecFn, TaskCheck, check_task, load_tasks
from runner.evaluator.core.inputs import project_root
from runner.imagebuild import builder as images
from runner.imagebuild.sources import extract_source, fetch_sources
from runner.runtime.host import naming, paths
from runner.runtime.sandbox import registry
from runner.runtime.sandbox.base import Sandbox, SandboxSpec

SCRATCH = "/tmp/afb-taskcheck-src"
IMAGE = "swe-lite"
EXEC_TIMEOUT_S = 600.0


def sandbox_exec(sandbox: Sandbox) -> ExecFn:
    def run(argv: Sequence[str], stdin: bytes) -> tuple[int, bytes, bytes]:
        r = sandbox.exec(list(argv), stdin=stdin, timeout=EXEC_TIMEOUT_S)
        return r.exit_code, r.stdout, r.stderr

    return run


def _tar_of(tree: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(tree.iterdir()):
            tar.add(p, arcname=p.name)
    return buf.getvalue()


def check_tasks_in_sandbox(
    tasks_root: Path,
    backend_name: str = registry.DEFAULT,
    *,
    cache: Path | None = None,
    on_task: Callable[[TaskCheck], None] | None = None,
) -> list[TaskCheck]:
    """Check every task of `tasks_root` in its own sandbox of the swe-lite image."""
    tasks = load_tasks(tasks_root)
    sdists = fetch_sources(tasks_root / "sources.toml", {t.source.ref for t in tasks}, cache)
    backend = registry.backend(backend_name)  # UnknownBackend names the registered ones
    built = images.ensure_image(project_root() / "images" / IMAGE, store=backend.images())
    run_id = naming.new_run_id()
    state = paths.SANDBOX_ROOT / run_id
    results: list[TaskCheck] = []
    try:
        with (
            naming.hold_run(run_id),
            backend.service(run_id, state) as service,
            tempfile.TemporaryDirectory(prefix="swelite-sbx-src-") as tmp,
        ):
            for i, task in enumerate(tasks):
                tree = Path(tmp) / str(i)  # holds <sdist root>/, as under /opt/swe-lite/src
                extract_source(sdists[task.source.ref], tree)
                sb = service.sandbox(
                    SandboxSpec(run_id=run_id, name_suffix=f"taskcheck-{i}", image=built.tag)
                )
                try:
                    sb.create()
                    sb.start()
                    sb.put_file(f"{SCRATCH}.tar", _tar_of(tree))
                    unpack = f"mkdir -p {SCRATCH} && tar -xf {SCRATCH}.tar -C {SCRATCH}"
                    r = sb.exec(["sh", "-c", unpack], timeout=EXEC_TIMEOUT_S)
                    if r.exit_code != 0:
                        raise RuntimeError(
                            f"{task.id}: unpacking its source in {sb.name} failed: "
                            + r.stderr.decode("utf-8", "replace")[-500:]
                        )
                    chk = check_task(task, sandbox_exec(sb), SCRATCH, "python3")
                finally:
                    sb.remove()
                    sb.close()
                results.append(chk)
                if on_task is not None:
                    on_task(chk)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return results


__all__ = ["IMAGE", "SCRATCH", "check_tasks_in_sandbox", "sandbox_exec"]
