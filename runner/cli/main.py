"""Entry point of the `bench` console script: importing a command module registers its commands."""

from __future__ import annotations

from . import env, evidence, images, protocol, reproduce, run, selftest, sweep  # noqa: F401
from .app import app


def main() -> None:
    app()


if __name__ == "__main__":
    main()
