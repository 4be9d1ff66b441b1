"""Subject contract v1: the config sections adapters share, and the environment a subject gets.

A subject's identity (`subject_config_hash`, evaluator side) is the digest of its agent + config
as written in the spec, so everything that makes two subjects different must be *in* the config
at plan time, without building or running anything. A subject that brings its own installed
environment (a locked uv project) or model cassettes therefore declares their digests
(tree.py) in the config; the runtime refuses to run (InputError, exit 2) when the files on disk
do not hash to what the spec declares. docs/SUBJECTS.md.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from runner.evaluator.core.types import Digest, StrictFrozen

SUBJECT_CONTRACT_VERSION = "afb.subject-contract/1"

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
