"""Dask preload of a `bench worker` process (`dask worker --preload runner.scale.worker_preload`).

At worker start it opens this process's `WorkerRuntime` (liveness lock, private Podman service),
so a host that cannot run attempts fails at startup, not at its first attempt; at worker close it
tears the runtime down (Podman service stopped, scratch removed).
"""

from __future__ import annotations

from typing import Any

from runner.scale.worker_runtime import close_runtime, runtime


def dask_setup(worker: Any) -> None:
    runtime().open()


def dask_teardown(worker: Any) -> None:
    close_runtime()
