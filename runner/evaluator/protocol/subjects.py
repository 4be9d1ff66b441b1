"""Subject contract v1: the typed config of a `[[subjects]]` entry, and the digests it declares.

Why here (evaluator side): a subject's identity (`subject_config_hash`, matrix.py) is the digest of
its agent + config as written in the spec, so everything that makes two subjects different must be
*in* the config at plan time, without building or running anything. A subject that brings its own
installed environment (a locked uv project) or model cassettes therefore declares their digests in
the config; the runtime refuses to run (InputError, exit 2) when the files on disk do not hash to
what the spec declares, and the evaluator re-derives the subject hash from the spec text alone.

`tree_digest` is the one definition of a folder's digest (both sides use it): RFC 8785 + SHA-256 of
`{schema, files: {relative path: sha256 of bytes}}`, regular files only, `__pycache__` and `*.pyc`
left out (an interpreter may create them beside the sources; they are not inputs).

The adapters themselves (which adapter names exist, how they launch) are runtime
(runner/runtime/adapters.py); these models are the config grammar they validate with, exported
as JSON Schemas (`bench schema`) and documented in docs/SUBJECTS.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from runner.evaluator.core.bounded import TASK_FILE_CAP, check_tree, sha256_bounded
from runner.evaluator.core.canonical import digest
from runner.evaluator.core.types import Digest, StrictFrozen

SUBJECT_CONTRACT_VERSION = "afb.subject-contract/1"
TREE_SCHEMA = "afb.tree/1"
MODEL_TOOL = "model"  # model calls through the proxy are this tool for triggers and ordinals

EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
RelPath = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^/\\][^\\]*$")]

# Variables the harness sets; a subject's config may not override them (docs/SUBJECTS.md).
RESERVED_ENV = frozenset(
    {
        "AFB_INTERPOSER_URL",
        "AFB_EGRESS_URL",
        "AFB_STATE_DIR",
        "AFB_EVENT_LOG",
        "AFB_TASK_ID",
        "AFB_TASK_FILE",
        "AFB_SCOPE",
        "AFB_RESTART_INDEX",
        "AFB_MCP_URL",
        "AFB_MODEL_URL",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "HOME",
    }
)


def _ignored(rel: Path) -> bool:
    return "__pycache__" in rel.parts or rel.suffix == ".pyc"


def tree_files(root: Path) -> dict[str, str]:
    """Relative path -> sha256 hex of every regular file under `root` (sorted, ignored left out)."""
    if root.is_dir() and not root.is_symlink():
        check_tree(root)  # bounded: a huge or sparse file fails fast, named
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if _ignored(rel) or p.is_symlink() or not p.is_file():
            continue
        # size before content: a sparse giant is refused by its stat size, the rest streamed
        out[rel.as_posix()] = sha256_bounded(p, TASK_FILE_CAP, evidence=False)[len("sha256:") :]
    return out


def tree_digest(root: Path) -> str:
    """The digest of a folder's contents (see the module docstring)."""
    return digest({"schema": TREE_SCHEMA, "files": tree_files(root)})


class UvEnvironment(StrictFrozen):
    """A locked Python environment: a uv project (pyproject.toml + uv.lock + the subject's own
    glue sources) built with `uv sync --frozen` into a folder named by `digest`, outside the
    runner's venv."""

    kind: Literal["uv"] = "uv"
    project: RelPath = Field(
        description="the uv project folder, relative to the checkout root (e.g. subjects/NAME)"
    )
    digest: Digest = Field(description="tree_digest of the project folder; enters the subject hash")


class ModelSection(StrictFrozen):
    """The model proxy of each attempt: which mode, and the cassettes it serves or records."""

    mode: Literal["scripted", "replay", "record", "live"]
    cassettes: RelPath | None = Field(
        default=None,
        description="folder of cassettes, relative to the spec's folder; one per task: "
        "<task id>.json (scripted, replay)",
    )
    digest: Digest | None = Field(
        default=None, description="tree_digest of the cassettes folder; enters the subject hash"
    )
    provider: Literal["openai", "anthropic"] = Field(
        default="openai", description="live/record: which dialect family `upstream` serves"
    )
    upstream: str | None = Field(
        default=None, description="live/record: the upstream base URL (the key comes from the env)"
    )
    key_env: EnvName | None = Field(
        default=None, description="live/record: the harness variable holding the upstream key"
    )
    policy: Literal["careful", "naive"] | None = Field(
        default=None,
        description="the model policy, a controlled factor: careful (after an uncertain or "
        "failed irreversible call, ask its status first; re-submit only if nothing was "
        "committed) or naive (re-submit after any error); scripted mode, policy cassettes "
        "declaring the same policy. Absent: no policy (the spec text enters the subject hash)",
    )

    @model_validator(mode="after")
    def _complete(self) -> ModelSection:
        if self.policy is not None and self.mode != "scripted":
            raise ValueError("model.policy is served by policy cassettes: mode 'scripted'")
        if self.mode in ("scripted", "replay") and (self.cassettes is None or self.digest is None):
            raise ValueError(f"model mode {self.mode!r} needs cassettes and digest")
        if self.mode in ("live", "record") and (self.upstream is None or self.key_env is None):
            raise ValueError(f"model mode {self.mode!r} needs upstream and key_env")
        if (self.cassettes is None) != (self.digest is None):
            raise ValueError("cassettes and digest go together")
        return self


class Limits(StrictFrozen):
    max_relaunches: int = Field(default=3, ge=0, le=20)
    timeout_s: float = Field(default=600.0, gt=0, le=7200)


class CommandConfig(StrictFrozen):
    """`agent = "command:<name>"`: run any argv as the subject."""

    argv: list[str] = Field(
        min_length=1,
        description="sequence; `{env}` in an element is the built environment's folder, "
        "`{project}` the project folder inside it",
    )
    env: dict[EnvName, str] = Field(default_factory=dict, description="added to the subject env")
    environment: UvEnvironment | None = None
    model: ModelSection | None = None
    mcp: bool = Field(default=False, description="serve the spec's tools over MCP (AFB_MCP_URL)")
    limits: Limits = Limits()

    @model_validator(mode="after")
    def _env_keys(self) -> CommandConfig:
        bad = sorted(set(self.env) & RESERVED_ENV)
        if bad:
            raise ValueError(f"env may not set harness variables {bad}")
        return self


class MiniSweAgentConfig(StrictFrozen):
    """`agent = "mini-swe-agent:<name>"`: mini-swe-agent, unmodified, in its locked environment."""

    environment: UvEnvironment
    model: ModelSection
    model_name: str = Field(default="openai/afb-scripted", min_length=1, max_length=128)
    step_limit: int = Field(default=50, ge=1, le=1000)
    exec_timeout_s: int = Field(default=120, ge=1, le=3600)
    limits: Limits = Limits()


# runner/benchmarks/swe_lite/subjects/reference.py's strategies (a subject imports nothing of
# runner; a test keeps the two lists equal).
REFERENCE_STRATEGIES = ("blind_retry", "checkpoint", "idempotency_key", "intent_reconcile")


class ReferenceConfig(StrictFrozen):
    """`agent = "reference:<name>"`: a reference strategy, an oracle (swe-lite's:
    runner/benchmarks/swe_lite/subjects/reference.py).

    With `model`, it asks that model which step comes next before every step (a control whose
    model calls are as mandatory as its tool calls, so faults on tool `model` reach it)."""

    strategy: Literal["blind_retry", "checkpoint", "idempotency_key", "intent_reconcile"]
    model: ModelSection | None = Field(
        default=None, description="plan each step with this model (scripted: one turn per step)"
    )


# A subject's role: `reference:` subjects are oracles (they are given the known answer through
# their own channel, so their result validates the benchmark, it does not rank an agent); every
# other adapter's subject is an agent, given the agent view only. Recorded in protocol.json and in
# each scorecard.
SubjectRole = Literal["oracle", "agent"]
ORACLE_ADAPTERS = frozenset({"reference"})


def subject_role(agent: str) -> SubjectRole:
    """The role of a `[[subjects]].agent` (`<adapter>:<name>`): oracle or agent."""
    return "oracle" if agent.partition(":")[0] in ORACLE_ADAPTERS else "agent"


class SubjectEnv(StrictFrozen):
    """What a subject finds in its environment (contract v1): the values of one attempt."""

    AFB_INTERPOSER_URL: str
    AFB_EGRESS_URL: str
    AFB_STATE_DIR: str
    AFB_EVENT_LOG: str
    AFB_TASK_ID: str
    AFB_TASK_FILE: str
    AFB_SCOPE: str
    AFB_RESTART_INDEX: str
    AFB_MCP_URL: str | None = None
    OPENAI_BASE_URL: str | None = None
    ANTHROPIC_BASE_URL: str | None = None
    OPENAI_API_KEY: str | None = None
    ANTHROPIC_API_KEY: str | None = None
    HOME: str
