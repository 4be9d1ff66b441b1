"""Fixtures for the MCP tool-server tests (helpers in `tests/mcp/helpers.py`).

No `__init__.py` here on purpose: a package named `mcp` under tests/ would shadow the `mcp` SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.evaluator.protocol.faultkinds import FaultKind
from runner.evaluator.protocol.witness import WitnessContract, load_contracts
from runner.runtime.interposers.mcp_tools import McpToolServer
from runner.runtime.interposers.tools import ToolInterposer
from tests.mcp.helpers import WITNESSES, RecordingSink

# the interposer tests' fixtures: a temp run dir, an attempt journal, a real destination
from tests.runtime_interposers.conftest import LocalSandbox, destination, journal, run_dir  # noqa: F401


@pytest.fixture
def sandbox(run_dir: Path) -> LocalSandbox:  # noqa: F811
    root = run_dir / "sandbox"
    root.mkdir()
    return LocalSandbox(root)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def ti(sandbox: LocalSandbox, sink: RecordingSink) -> Iterator[ToolInterposer]:
    with ToolInterposer(sandbox, sink=sink, run_tests_argv=["sh", "-c", "echo ran; exit 3"]) as t:
        yield t


@pytest.fixture
def server(ti: ToolInterposer) -> Iterator[McpToolServer]:
    with McpToolServer(ti) as m:
        yield m


@pytest.fixture(scope="session")
def contracts() -> dict[FaultKind, WitnessContract]:
    return load_contracts(WITNESSES)
