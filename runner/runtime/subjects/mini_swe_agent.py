"""`agent = "mini-swe-agent:<name>"`: mini-swe-agent, unmodified, from subjects/mini-swe-agent/
(its own lock), with the environment class shipped there."""

from __future__ import annotations

from pydantic import Field

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.types import StrictFrozen
from runner.evaluator.protocol.spec import Subject
from runner.runtime.attempt.api import SubjectCommand
from runner.runtime.subjects.config import Limits, ModelSection, UvEnvironment
from runner.runtime.subjects.environment import ensure_built
from runner.runtime.subjects.model import model_plans
from runner.runtime.subjects.registry import Launch, ResolveContext, register_adapter, typed_config
from runner.runtime.workload import TaskViews

# The tools its model is given, for the policy cassettes' tool check.
MINI_SWE_AGENT_MODEL_TOOLS = frozenset({"bash"})


class MiniSweAgentConfig(StrictFrozen):
    """`agent = "mini-swe-agent:<name>"`: mini-swe-agent, unmodified, in its locked environment."""

    environment: UvEnvironment
    model: ModelSection
    model_name: str = Field(default="openai/afb-scripted", min_length=1, max_length=128)
    step_limit: int = Field(default=50, ge=1, le=1000)
    exec_timeout_s: int = Field(default=120, ge=1, le=3600)
    limits: Limits = Limits()


ENV_CLASS = "afb_msa.environment.AfbSandboxEnvironment"
# The bash command the environment class maps to the read-only status tool (submission_status).
MINI_STATUS_COMMAND = "afb-submission-status"


class MiniSweAgentAdapter:
    """`mini-swe-agent:<name>`: the `mini` command of the pinned package, unmodified.

    Its model is litellm's OpenAI client at the attempt's model proxy (OPENAI_BASE_URL); its
    environment class (subjects/mini-swe-agent/afb_msa) runs every bash action in the sandbox
    through the tool interposer and maps the submit command to the irreversible tool.
    """

    config = MiniSweAgentConfig

    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:
        cfg = typed_config(subject, MiniSweAgentConfig)
        built = ensure_built(cfg.environment, root=ctx.root)
        if not (built.project / "afb_msa" / "environment.py").is_file():
            raise InputError(
                f"subject environment {cfg.environment.project!r} has no afb_msa/environment.py "
                "(the environment class)",
                key="environment.project",
            )
        plans = model_plans(cfg.model, ctx, MINI_SWE_AGENT_MODEL_TOOLS)
        argv0 = [
            str(built.python), "-m", "minisweagent.run.mini",
            "-c", "mini.yaml",
            "-c", f"agent.step_limit={cfg.step_limit}",
            "-c", "agent.cost_limit=0",
            "-c", f"environment.timeout={cfg.exec_timeout_s}",
            "-c", "model.cost_tracking=ignore_errors",
            "--agent-class", "default",
            "--environment-class", ENV_CLASS,
            "--model-class", "litellm",
            "-m", cfg.model_name,
            "--yolo", "--exit-immediately",
            "-o", "trajectory.json",
        ]  # fmt: skip
        env = {
            "PYTHONPATH": str(built.project),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "NO_COLOR": "1",
            "TERM": "dumb",
        }

        def launch(views: TaskViews) -> SubjectCommand:
            # its `-t`: the workload's prompt, from the agent view only
            return SubjectCommand(
                argv=[*argv0, "-t", views.prompt(MINI_STATUS_COMMAND)],
                env=env,
                max_relaunches=cfg.limits.max_relaunches,
                timeout_s=cfg.limits.timeout_s,
                task=dict(views.agent()),
                model=plans(views.task_id),
            )

        return launch


register_adapter("mini-swe-agent", MiniSweAgentAdapter())
