"""Can this host run attempts? The checks `bench worker` makes before it accepts any work.

An attempt needs root (network namespaces, nftables, the sandbox backend's service, subjects run
as `nobody`), a usable sandbox backend (its `host_problems`: for Podman, `podman info` answers),
`nft`, and the sandbox image of every spec it serves, loaded in the backend's image store and
tagged by its input digest (the tag is derived from the image's declared inputs, so a present
tag is the image those inputs build). A worker that accepted work without them would turn every
attempt it took into HARNESS_INVALID; it refuses to start instead, naming each missing thing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.runtime.prepared import SpecSource


def check_address(address: str, key: str) -> str:
    """A Dask scheduler address: tcp://HOST:PORT (or tls://)."""
    scheme, sep, rest = address.partition("://")
    host, colon, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls") or not sep or not colon or not host or not port.isdigit():
        raise InputError(f"expected tcp://HOST:PORT, got {address[:80]!r}", key=key)
    return address


def parse_resources(text: str | None, key: str = "--resources") -> dict[str, float]:
    """`NETNS=1` or `NETNS=1,GPU=2` (also space-separated, as `dask worker` takes them)."""
    if text is None or not text.strip():
        return {}
    out: dict[str, float] = {}
    for item in text.replace(",", " ").split():
        name, sep, value = item.partition("=")
        try:
            amount = float(value)
        except ValueError:
            amount = -1.0
        if not sep or not name.isidentifier() or amount <= 0:
            raise InputError(f"expected NAME=AMOUNT (AMOUNT > 0), got {item!r}", key=key)
        if name in out:
            raise InputError(f"resource {name} given twice", key=key)
        out[name] = amount
    return out


def host_problems(specs: Sequence[SpecSource], sandbox_backend: str | None = None) -> list[str]:
    """Everything that keeps this host from running the specs' attempts ([] when ready); each
    spec as `bench worker` read it, once."""
    from runner.runtime.sandbox import registry

    backend = registry.backend(sandbox_backend or registry.DEFAULT)
    problems = []
    if os.geteuid() != 0:
        problems.append(
            f"not root: attempts need network namespaces, nftables and {backend.name} as root"
        )
    if shutil.which("nft") is None:
        problems.append("nft not found on PATH (nftables: the partition fault and its witness)")
    backend_problems = backend.host_problems()
    problems += backend_problems
    problems += image_problems(specs, backend.name) if not backend_problems else []
    return problems


def image_problems(specs: Sequence[SpecSource], sandbox_backend: str | None = None) -> list[str]:
    """Each spec's sandbox image must be loaded under the tag of its current input digest."""
    from runner.benchmarks.registry import workload_for
    from runner.imagebuild import builder as images
    from runner.runtime.sandbox import registry

    backend = registry.backend(sandbox_backend or registry.DEFAULT)
    store = backend.images()
    problems = []
    for source in specs:
        spec_path = source.path
        workload = workload_for(source.spec, spec_path)  # InputError: a grader of no benchmark
        image_dir = project_root() / "images" / workload.image
        if images.built_image(image_dir, store) is None:
            problems.append(
                f"{spec_path}: image {images.image_tag(image_dir)} (input digest "
                f"{images.image_input_digest(image_dir)}) is not loaded in {backend.name}; "
                "build it with "
                f"`bench images build images/{workload.image} --if-missing`"
            )
    return problems


HOST_ENVIRONMENT_VAR = "AFB_HOST_ENVIRONMENT"  # a file: {spec digest: environment artifact}


def observe_host(specs: Sequence[SpecSource], folder: Path) -> Path:
    """Observe this host's execution environment once per spec, for all its worker processes.

    The environment is the host's, not a process's: worker processes of one host report the
    same artifact (one record in the run, as for a local run), and their calibrations are not
    measured against each other's load. Returns the file to hand to them (HOST_ENVIRONMENT_VAR).
    """
    import json

    from runner.benchmarks.registry import workload_for
    from runner.evaluator.core.canonical import canonical_bytes
    from runner.imagebuild import builder as images
    from runner.runtime import envcollect

    observed: dict[str, str] = {}
    for source in specs:
        workload = workload_for(source.spec, source.path)
        tag = images.image_tag(project_root() / "images" / workload.image)
        env = envcollect.observe(source.spec, image=tag)
        observed[source.digest] = canonical_bytes(env.to_json()).decode()
    path = folder / "host-environment.json"
    path.write_text(json.dumps(observed, sort_keys=True))
    return path
