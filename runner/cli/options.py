"""Options and helpers several command modules share, so no command module imports another
(tests/foundation/test_cli_imports.py): the trust options (`--trusted-keys`, `--allow-unsigned`,
`--dir`), the registry, `--jobs` and its default, the run-directory argument."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol import freeze as freezing
from runner.evaluator.publish.registry import Registry
from runner.evaluator.trust.keys import TRUSTED_ENV
from runner.signing import keys as signing

KeyDir = Annotated[
    Path | None,
    typer.Option("--dir", help=f"key directory (default: ${signing.KEY_DIR_ENV} or "
                 f"{signing.DEFAULT_KEY_DIR})", file_okay=False),
]  # fmt: skip
TrustedOpt = Annotated[
    Path | None,
    typer.Option("--trusted-keys", help=f"directory of trusted *.pub keys (default: "
                 f"${TRUSTED_ENV} or keys/trusted/)", file_okay=False),
]  # fmt: skip
AllowUnsigned = Annotated[
    bool,
    typer.Option(
        "--allow-unsigned",
        help="accept an unsigned local run (its results are still re-derived from its evidence); "
        "never for publication",
    ),
]
RunDir = Annotated[Path, typer.Argument(help="a run directory", file_okay=False)]
RegOpt = Annotated[
    Path | None, typer.Option("--registry", help="registry file (default: the repository's)")
]

SandboxOpt = Annotated[
    str,
    typer.Option(
        "--sandbox",
        help="the sandbox backend the attempts run on (a registered name; `bench selftest "
        "--sandbox NAME` checks one)",
    ),
]


def check_sandbox(name: str) -> str:
    """A registered sandbox backend's name, else exit 2 listing the registered ones."""
    from runner.runtime.sandbox import registry

    return registry.require(name)


MAX_JOBS = 8
GIB_PER_JOB = 1  # one attempt: a sandbox container, the subject, its interposers (~0.3-0.6 GiB)
JOBS_RULE = (
    f"default: what this machine carries, min({MAX_JOBS}, usable CPUs, available memory / "
    f"{GIB_PER_JOB} GiB), at least 1"
)
Jobs = Annotated[
    int | None, typer.Option(min=1, max=MAX_JOBS, help=f"cells run in parallel ({JOBS_RULE})")
]


def usable_cpus() -> int:
    """CPUs this process may use: its affinity, lowered by a cgroup v2 CPU quota if one is set."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota readable: the affinity stands
    return cpus


def default_jobs() -> int:
    """The `--jobs` a local run uses when none is given (README: "Running")."""
    import psutil

    by_memory = psutil.virtual_memory().available // (GIB_PER_JOB << 30)
    return max(1, min(MAX_JOBS, usable_cpus(), by_memory))


def need_run_dir(path: Path) -> None:
    # lexists: a FIFO or symlink protocol.json is the layout check's to name (exit 3), not "absent"
    if not os.path.lexists(path / "protocol.json"):
        raise InputError("not a run directory (no protocol.json)", file=str(path))


def registry_path(given: Path | None) -> Path:
    """The registry file: the one given, else the repository's (not the working directory's).
    A missing registry is an error, never an empty one."""
    path = given if given is not None else project_root() / "registry" / "registry.jsonl"
    if not path.is_file():
        raise InputError(
            "no registry here (a missing registry is an error, not an empty one; "
            "`bench registry init --registry PATH` creates one)",
            file=str(path),
        )
    return path


def open_registry(
    given: Path | None, trusted_dir: Path | None, *, write: bool = False,
    key_dir: Path | None = None,
) -> Registry:  # fmt: skip
    """The registry, anchored: every read checks its signed head against the trusted keys; a
    writer re-signs the head with the signing key after each append."""
    from runner.evaluator.trust.head import check_head
    from runner.evaluator.trust.keys import trusted_keys

    path = registry_path(given)
    keys = trusted_keys(trusted_dir)
    sealer = None
    if write:
        from runner.signing.sign import sign_head

        signer = signing.load_signer(key_dir)

        def sealer(p: Path) -> object:
            return sign_head(p, signer)

    return Registry(path, anchor=lambda p: check_head(p, keys), sealer=sealer)


# The freeze log is believed only as its signed head covers it (bench plan/freeze/amend/run).
def anchor(trusted_dir: Path | None = None) -> freezing.Anchor:
    from runner.evaluator.trust.head import freeze_anchor
    from runner.evaluator.trust.keys import trusted_keys

    return freeze_anchor(lambda: trusted_keys(trusted_dir))  # loaded only for a frozen spec


def sealer(key_dir: Path | None = None) -> freezing.Sealer:
    """Loads the signing key now: a freeze or amendment without it is refused before writing."""
    from runner.signing.keys import load_signer
    from runner.signing.sign import sign_head

    signer = load_signer(key_dir)

    def seal(log: Path) -> object:
        return sign_head(log, signer, per_line=True)

    return seal
