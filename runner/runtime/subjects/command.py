"""`agent = "command:<name>"`: any argv as the subject, optionally in a locked uv environment,
with a model proxy and the spec's tools over MCP."""

from __future__ import annotations

from pydantic import Field, model_validator

from runner.evaluator.core.types import StrictFrozen
from runner.evaluator.protocol.spec import Subject
from runner.runtime.attempt.api import SubjectCommand
from runner.runtime.subjects.config import (
    RESERVED_ENV,
    EnvName,
    Limits,
    ModelSection,
    UvEnvironment,
)
from runner.runtime.subjects.environment import BuiltEnvironment, ensure_built
from runner.runtime.subjects.model import model_plans
from runner.runtime.subjects.registry import Launch, ResolveContext, register_adapter, typed_config
from runner.runtime.workload import TaskViews


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


def _expand(arg: str, env: BuiltEnvironment | None) -> str:
    if env is None:
        return arg
    return arg.replace("{env}", str(env.path)).replace("{project}", str(env.project))


class CommandAdapter:
    """`command:<name>`: `config.argv` as the subject, in its environment when it declares one."""

    config = CommandConfig

    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:
        cfg = typed_config(subject, CommandConfig)
        built = ensure_built(cfg.environment, root=ctx.root) if cfg.environment else None
        tools = frozenset(t.name for t in ctx.spec.tools)  # what MCP / the HTTP API serve it
        plans = model_plans(cfg.model, ctx, tools) if cfg.model is not None else None
        argv = [_expand(a, built) for a in cfg.argv]
        env = {k: _expand(v, built) for k, v in cfg.env.items()}

        def launch(views: TaskViews) -> SubjectCommand:
            return SubjectCommand(
                argv=argv,
                env=env,
                max_relaunches=cfg.limits.max_relaunches,
                timeout_s=cfg.limits.timeout_s,
                task=dict(views.agent()),
                model=plans(views.task_id) if plans is not None else None,
                mcp=cfg.mcp,
                tools=tuple(ctx.spec.tools),
            )

        return launch


register_adapter("command", CommandAdapter())
