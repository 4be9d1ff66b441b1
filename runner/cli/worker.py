"""`bench worker --scheduler tcp://HOST:PORT --spec SPEC`: a Dask worker that runs attempts.

It checks its host first (root, Podman, nft, each spec's image by input digest) and refuses with
exit 2 naming what is missing. Then it starts `--nworkers` Dask worker processes (each under a
Dask Nanny, one thread: one attempt at a time), advertising `--resources` (e.g. NETNS=1, what
`bench run --cluster ... --resources NETNS=1` asks for). The equivalent with Dask's own CLI:
`dask worker ADDR --nthreads 1 --resources NETNS=1 --preload runner.scale.worker_preload`.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import EXIT_INPUT, app, err, guarded, out
from runner.cli.options import SandboxOpt, check_sandbox


async def _serve(
    scheduler: str, nworkers: int, resources: dict[str, float], env: dict[str, str]
) -> None:
    from distributed import Nanny

    nannies = [
        Nanny(
            scheduler,
            nthreads=1,
            resources=resources or None,
            preload=["runner.scale.worker_preload"],
            memory_limit=0,
            silence_logs=False,
            env=env,
        )
        for _ in range(nworkers)
    ]
    await asyncio.gather(*(n.start() for n in nannies))
    for n in nannies:
        out.print(f"worker {n.worker_address} (nanny {n.address}) serving {scheduler}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    finished = [asyncio.ensure_future(n.finished()) for n in nannies]
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait([waiter, *finished], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(*(n.close(timeout=60) for n in nannies), return_exceptions=True)


@app.command()
@guarded
def worker(
    scheduler: Annotated[str, typer.Option(help="the Dask scheduler, tcp://HOST:PORT")],
    spec: Annotated[
        list[Path], typer.Option(help="a spec this worker serves (its image must be present)")
    ],
    resources: Annotated[
        str | None, typer.Option(help="resources advertised to the scheduler, e.g. NETNS=1")
    ] = None,
    nworkers: Annotated[int, typer.Option(min=1, max=64, help="worker processes")] = 1,
    sandbox: SandboxOpt = "podman",
) -> None:
    """Serve a `bench run --cluster` coordinator: run its attempts on this host."""
    from runner.runtime.prepared import SpecSource
    from runner.scale.worker_host import check_address, host_problems, parse_resources

    check_sandbox(sandbox)
    parsed = parse_resources(resources)
    check_address(scheduler, "--scheduler")
    sources = [SpecSource.read(p) for p in spec]  # each spec read once (InputError: a bad one)
    problems = host_problems(sources, sandbox)
    if problems:
        for p in problems:
            err.print(f"refused: {p}", markup=False)
        err.print("this host cannot run attempts; no worker started")
        raise typer.Exit(EXIT_INPUT)
    from runner.scale.worker_host import HOST_ENVIRONMENT_VAR, observe_host
    from runner.scale.worker_runtime import SANDBOX_VAR, WORKER_IDS_VAR

    with tempfile.TemporaryDirectory(prefix="afb-worker-") as folder:
        observed = observe_host(sources, Path(folder))
        ids = Path(folder) / "workers"
        ids.mkdir()
        env = {
            HOST_ENVIRONMENT_VAR: str(observed),
            WORKER_IDS_VAR: str(ids),
            SANDBOX_VAR: sandbox,
        }
        try:
            asyncio.run(_serve(scheduler, nworkers, parsed, env))
        finally:
            _sweep_own(ids)


def _sweep_own(ids: Path) -> None:
    """Leftovers of this command's worker processes that did not tear down (killed by their
    Nanny mid-close, or crashed and replaced); live ones (lock held) are left alone."""
    from runner.runtime.sweep import sweep

    for entry in sorted(ids.iterdir()):
        report = sweep(prefix_filter=entry.name)
        if report.removed_anything:
            out.print(f"swept leftovers of worker {entry.name}", markup=False)
