"""Entry point of the `bench` console script: importing a command module registers its commands."""

from __future__ import annotations

from . import (  # noqa: F401
    env,
    evidence,
    freezelog,
    images,
    keys,
    merge,
    protocol,
    regrade,
    report,
    reproduce,
    run,
    selftest,
    subjects,
    sweep,
    tasks,
    vectors,
    worker,
)
from .app import app


def main() -> None:
    app()


if __name__ == "__main__":
    main()
