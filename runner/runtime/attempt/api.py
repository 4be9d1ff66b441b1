"""The contract between the matrix executor (which cells, which attempts) and one attempt.

`run_attempt(plan, services)` (runner/runtime/attempt.py) sets up the attempt's own network
namespace, nft table, sandbox, tool interposer, destination service and egress proxy; launches
the subject inside the namespace as an unprivileged user; drives the trigger engine with the
plan's fault plugin; relaunches the subject when a fault's recovery asks for it; grades; writes
every record to the attempt's journal; and tears down exactly what it created.

The subject reaches everything through environment variables (SUBJECT_ENV), never through
anything the harness owns directly. It cannot write into the evidence store: the run directory
is root-only and the subject runs as `nobody`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from runner.evaluator.protocol.faultkinds import FaultKind
from runner.runtime.sandbox.base import Sandbox

# Environment variables every subject receives (docs/SUBJECTS.md, contract v1).
SUBJECT_ENV = (
    "AFB_INTERPOSER_URL",  # http://<host side of the veth>:<port>  (tool calls: /session, /call)
    "AFB_EGRESS_URL",  # http://<host side of the veth>:<port>  (the destination, via the proxy)
    "AFB_STATE_DIR",  # the subject's own state directory, the same across relaunches
    "AFB_EVENT_LOG",  # agent-side event log (JSON lines) outside the subject process's memory
    "AFB_TASK_ID",
    "AFB_TASK_FILE",  # the task as the workload describes it (JSON), in the state directory
    "AFB_SCOPE",  # the destination scope of this attempt's effects
    "AFB_RESTART_INDEX",  # 0 at first launch, then 1, 2, ... per relaunch
    "HOME",  # = AFB_STATE_DIR (agents keep config and caches under $HOME)
)
# ... and, when the subject declares them: the MCP endpoint (AFB_MCP_URL) and the model proxy
# (OPENAI_BASE_URL, ANTHROPIC_BASE_URL, with a dummy OPENAI_API_KEY / ANTHROPIC_API_KEY).
MODEL_PROXY_ENV = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
MCP_ENV = ("AFB_MCP_URL",)


@dataclass(frozen=True)
class ModelProxyPlan:
    """The model proxy of one attempt (runner/runtime/interposers/modelproxy)."""

    mode: Literal["scripted", "replay", "record", "live"]
    cassette: Path | None = None  # scripted/replay: this task's cassette (checked at resolve)
    provider: Literal["openai", "anthropic"] = "openai"
    upstream: str | None = None  # live/record
    key_env: str | None = None  # live/record: the harness variable with the upstream key


def journal_name(cell_id: str, attempt: int) -> str:
    """The journal of one attempt; the executor finds attempts by this name, so one definition."""
    return f"{cell_id.removeprefix('sha256:')[:16]}-a{attempt}"


@dataclass(frozen=True)
class SubjectCommand:
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)  # added to SUBJECT_ENV
    max_relaunches: int = 3
    timeout_s: float = 300.0  # whole-attempt bound for the subject; exceeded -> harness error
    task: Mapping[str, Any] | None = None  # written to AFB_TASK_FILE when given
    # the oracle view (oracle subjects only): written to AFB_ORACLE_FILE in the state directory,
    # never put in argv (any local user may read a process's command line)
    oracle: Mapping[str, Any] | None = None
    model: ModelProxyPlan | None = None  # start a model proxy for the attempt
    mcp: bool = False  # serve the tools over MCP (AFB_MCP_URL)
    tools: Sequence[Any] = ()  # the spec's [[tools]] (served over MCP); () = the defaults


class ReadLedger(Protocol):
    def __call__(self, scope: str) -> tuple[list[dict[str, Any]] | None, list[str]]:
        """Shape-checked read of the destination's ledger: (items, []) or (None, reasons)."""


class FreshSandbox(Protocol):
    def __call__(self) -> AbstractContextManager[Sandbox]:
        """A context manager yielding a new sandbox (same image, no network) for grading."""


@dataclass(frozen=True)
class GradeContext:
    scope: str
    read_ledger: ReadLedger
    fresh_sandbox: FreshSandbox
    tool_calls: Mapping[str, int]


@dataclass(frozen=True)
class GradeOutcome:
    completed: bool
    intended_effects: int
    committed_effects: int
    shape_ok: bool
    shape_failures: Sequence[str] = ()
    report: Mapping[str, Any] | None = None  # stored as a blob, referenced by the record


@dataclass(frozen=True)
class AttemptPlan:
    run_id: str
    run_dir: Path
    cell_id: str
    slot_id: str
    subject_id: str
    subject_config_hash: str
    attempt: int
    task_id: str
    fault_id: str
    kind: FaultKind
    trigger: Mapping[str, Any] | None
    parameters: Mapping[str, Any]
    image: str
    subject: SubjectCommand
    grader_id: str
    grader_version: str
    scorer_version: str
    grade: Callable[[GradeContext], GradeOutcome]
    sandbox_setup: Sequence[Sequence[str]] = ()  # argv run in the sandbox before the subject
    # (method, path) at the destination -> the irreversible tool it stands for: the workload's
    # submit route (`Workload.effect_routes`), or the self-test's; none by default
    proxy_tools: Mapping[tuple[str, str], str] = field(default_factory=dict)
    idempotency_keys: bool = True  # the destination's declared capability
    actuator: Literal["real", "noop"] = "real"  # noop: negative conformance
    # absolute directories the subject must not see (issue 23): masked in its mount namespace
    hidden_paths: Sequence[Path] = ()


@dataclass(frozen=True)
class AttemptResult:
    outcome: Literal[
        "subject_finished",
        "subject_gave_up",
        "harness_error",
        "trigger_not_reached",
        "injection_rejected",
    ]
    trigger_reached: bool
    wall_ns: int
    tool_calls: Mapping[str, int]
    journal: Path
