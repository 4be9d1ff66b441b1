"""Subject adapters: a spec's `[[subjects]].agent` (+ config) -> the command that launches it.

An agent is `<adapter>:<name>`; the part before ':' picks the adapter from a registry
(`register_adapter`). Every subject of a spec is resolved before any cell runs, so an unknown
adapter, a bad config, an environment that does not build or a missing/malformed cassette is an
input error (exit 2) naming the file and entry, never a harness error mid-run. Adapters:

- `reference:` the workload's oracle subjects (swe-lite: the deterministic reference strategies
  of runner/benchmarks/swe_lite/subjects/reference.py), the only adapter given the oracle view;
- `command:` any argv (config: runner/evaluator/protocol/subjects.py `CommandConfig`), optionally
  in a locked uv environment, with a model proxy and MCP tools;
- `mini-swe-agent:` mini-swe-agent, unmodified, from subjects/mini-swe-agent/ (its own lock), with
  the environment class shipped there (`MiniSweAgentConfig`).

Every adapter but `reference:` hands its subject the workload's agent view only (the task file,
mini-swe-agent's prompt); a non-oracle subject that asks for the oracle view is an input error.

The subject contract these launch against is docs/SUBJECTS.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from runner.evaluator.core.errors import InputError
from runner.evaluator.core.inputs import project_root
from runner.evaluator.protocol.cassette import load_cassette
from runner.evaluator.protocol.policy import PolicyCassette, check_policy
from runner.evaluator.protocol.spec import Spec, Subject
from runner.evaluator.protocol.specload import spec_base
from runner.evaluator.protocol.subjects import (
    CommandConfig,
    MiniSweAgentConfig,
    ModelSection,
    ReferenceConfig,
    subject_role,
    tree_digest,
)
from runner.runtime.attempt.api import ModelProxyPlan, SubjectCommand
from runner.runtime.host import paths
from runner.runtime.subjectenv import BuiltEnvironment, ensure_built
from runner.runtime.workload import TaskViews, Workload

M = TypeVar("M", bound=BaseModel)

# the task's views (agent; oracle for oracles only) -> the command of one attempt
Launch = Callable[[TaskViews], SubjectCommand]
# The oracle's own channel: a file named by this variable (its state directory is its own, its
# environment unreadable to other uids). Never AFB_TASK_FILE, never argv: /proc/<pid>/cmdline is
# readable by every local user, so an agent running beside an oracle could read it there.
ORACLE_CHANNEL = "AFB_ORACLE_FILE"


@dataclass(frozen=True)
class ResolveContext:
    """What an adapter may look at while resolving: the spec, where it lives, the checkout."""

    spec: Spec
    spec_path: Path
    root: Path
    workload: Workload | None = None  # what the oracle adapter asks for its subject's script

    @property
    def base(self) -> Path:
        return spec_base(self.spec_path)

    def task_ids(self) -> list[str]:
        return sorted(self.spec.task_index())


class SubjectAdapter(Protocol):
    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:
        """Check the subject's config (raise InputError) and return how to launch it."""
        ...


_ADAPTERS: dict[str, SubjectAdapter] = {}


def register_adapter(prefix: str, adapter: SubjectAdapter) -> None:
    if not prefix or ":" in prefix:
        raise ValueError(f"invalid adapter prefix {prefix!r}")
    _ADAPTERS[prefix] = adapter


def unregister_adapter(prefix: str) -> None:
    _ADAPTERS.pop(prefix, None)


def registered_adapters() -> tuple[str, ...]:
    return tuple(sorted(_ADAPTERS))


def _oracle_request(subject: Subject) -> str | None:
    """The config key by which a non-oracle subject asks for the oracle view, if it does: a key
    naming it, an env variable naming it, or an argv/env value using its channel."""
    for key, value in subject.config.items():
        names = [key, *(value if isinstance(value, dict) else {})]
        values = value if isinstance(value, list) else list(value.values()) if isinstance(
            value, dict) else [value]  # fmt: skip
        if any("oracle" in n.lower() for n in names if isinstance(n, str)) or any(
            isinstance(t, str) and ("--oracle" in t or ORACLE_CHANNEL in t or "{oracle}" in t)
            for t in values
        ):
            return key
    return None


def resolve_subjects(
    spec: Spec, spec_path: Path, workload: Workload | None = None
) -> dict[str, Launch]:
    """Every subject of the spec, by id; the first unresolvable one is an InputError."""
    out: dict[str, Launch] = {}
    ctx = ResolveContext(spec, spec_path, project_root(), workload)
    for i, s in enumerate(spec.subjects):
        asked = _oracle_request(s) if subject_role(s.agent) != "oracle" else None
        if asked is not None:
            raise InputError(
                f"subject {s.id!r} ({s.agent}) asks for the oracle view of the task: only "
                "'reference:' subjects (the oracles) get the known answer; every other subject "
                "is an agent and gets the agent view (AFB_TASK_FILE)",
                file=str(spec_path),
                key=f"subjects[{i}].config.{asked}",
            )
        prefix, sep, _ = s.agent.partition(":")
        adapter = _ADAPTERS.get(prefix) if sep else None
        if adapter is None:
            raise InputError(
                f"subject {s.id!r}: no subject adapter for agent {s.agent!r}; registered "
                f"adapters: {[f'{p}:' for p in registered_adapters()]}",
                file=str(spec_path),
            )
        try:
            out[s.id] = adapter.resolve(s, ctx)
        except InputError as exc:
            if exc.file is not None:  # about another file (a cassette, a lock): keep it
                raise InputError(
                    f"subject {s.id!r}: {exc.message}", file=exc.file, key=exc.key
                ) from None
            key = f"subjects[{i}].config" + (f".{exc.key}" if exc.key else "")
            raise InputError(exc.message, file=str(spec_path), key=key) from None
    return out


def typed_config(subject: Subject, model: type[M]) -> M:
    """The subject's config as its adapter's model; the first problem is an InputError."""
    try:
        return model.model_validate(subject.config)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(
            f"subject {subject.id!r} ({subject.agent}): {err['msg']}", key=loc or None
        ) from None


# ------------------------------------------------------------------------ reference: adapter


class ReferenceAdapter:
    """`reference:<strategy>` (`ReferenceConfig`): the workload's oracle subject (its script,
    `Workload.oracle_subject`) as the subject uid, given the oracle view through its own argv
    file (`AFB_ORACLE_FILE`); AFB_TASK_FILE holds the agent view, as for every subject. With
    `config.model`, it plans every step with that model through the attempt's proxy."""

    def resolve(self, subject: Subject, ctx: ResolveContext) -> Launch:
        source = ctx.workload.oracle_subject if ctx.workload is not None else None
        if source is None:
            raise InputError(
                f"subject {subject.id!r}: this spec's workload has no oracle (reference) subject"
            )
        if "strategy" not in subject.config:
            raise InputError(
                f"subject {subject.id!r}: a reference subject (agent = 'reference:...') needs "
                "config.strategy"
            )
        cfg = typed_config(subject, ReferenceConfig)
        # the planning control's model is given no tools: it answers `next: <step>`
        plans = model_plans(cfg.model, ctx, frozenset()) if cfg.model is not None else None
        script = str(self.public_script(source))
        planning = ["--plan-with-model"] if plans is not None else []

        def launch(views: TaskViews) -> SubjectCommand:
            argv = [
                "/usr/bin/python3", script,
                "--strategy", cfg.strategy, *planning,
            ]  # fmt: skip
            return SubjectCommand(
                argv=argv,
                task=dict(views.agent()),
                oracle=dict(views.oracle()),
                model=plans(views.task_id) if plans is not None else None,
            )

        return launch

    @staticmethod
    def public_script(source: Path) -> Path:
        """Copy the oracle subject somewhere `nobody` can read it, named by its content."""
        data = source.read_bytes()
        public = paths.SUBJECTS_PUBLIC_DIR
        target = public / f"reference-{hashlib.sha256(data).hexdigest()[:16]}.py"
        if not target.exists():
            public.mkdir(parents=True, exist_ok=True)
            os.chmod(public.parent, 0o755)
            os.chmod(public, 0o755)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, 0o644)
            tmp.replace(target)
        return target


# ------------------------------------------------------------------- shared: model, environment


# The tools each adapter's model is given, for the policy cassettes' tool check (None: any).
MINI_SWE_AGENT_MODEL_TOOLS = frozenset({"bash"})


def model_plans(
    model: ModelSection, ctx: ResolveContext, model_tools: frozenset[str] | None = None
) -> Callable[[str], ModelProxyPlan]:
    """Check the model section against the files and the host env; per task, its proxy plan.

    `model_tools`: the tools the subject's model is given (a policy cassette's rules may name
    only these and, through its `commands`, the spec's tools)."""
    if model.mode in ("live", "record"):
        assert model.key_env is not None
        if not os.environ.get(model.key_env):
            raise InputError(
                f"model mode {model.mode!r} needs the upstream key in ${model.key_env} (the "
                "harness's environment; it never reaches the subject or the evidence)",
                key="model.key_env",
            )
    cassettes: Path | None = None
    if model.cassettes is not None:
        cassettes = (ctx.base / model.cassettes).resolve()
        if not cassettes.is_dir():
            raise InputError(
                f"model.cassettes {model.cassettes!r}: no such folder beside the spec",
                key="model.cassettes",
            )
        actual = tree_digest(cassettes)
        if actual != model.digest:
            raise InputError(
                f"model.cassettes {model.cassettes!r} hashes to {actual}, the spec declares "
                f"{model.digest}: update model.digest (changed cassettes are a different subject)",
                key="model.digest",
            )
        for task_id in ctx.task_ids():
            path = cassettes / f"{task_id}.json"
            if not path.is_file():
                raise InputError(f"no cassette for task {task_id!r}", file=str(path))
            cassette = load_cassette(path)  # InputError naming the file and the entry
            want = "recorded" if model.mode == "replay" else "scripted"
            if isinstance(cassette, PolicyCassette) and model.mode == "scripted":
                check_policy(
                    cassette,
                    source=str(path),
                    model_tools=model_tools,
                    spec_tools=frozenset(t.name for t in ctx.spec.tools),
                    declared=model.policy,
                )
            elif model.policy is not None:
                raise InputError(
                    f"model.policy {model.policy!r} is served by a policy cassette; this one "
                    f"is {cassette.kind!r}",
                    file=str(path),
                    key="kind",
                )
            elif cassette.kind != want:
                raise InputError(
                    f"model mode {model.mode!r} serves a {want} cassette; this one is "
                    f"{cassette.kind!r}",
                    file=str(path),
                    key="kind",
                )

    def plan(task_id: str) -> ModelProxyPlan:
        return ModelProxyPlan(
            mode=model.mode,
            cassette=cassettes / f"{task_id}.json" if cassettes is not None else None,
            provider=model.provider,
            upstream=model.upstream,
            key_env=model.key_env,
        )

    return plan


def _expand(arg: str, env: BuiltEnvironment | None) -> str:
    if env is None:
        return arg
    return arg.replace("{env}", str(env.path)).replace("{project}", str(env.project))


# ------------------------------------------------------------------------------ command: adapter


class CommandAdapter:
    """`command:<name>`: `config.argv` as the subject, in its environment when it declares one."""

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


# ----------------------------------------------------------------------- mini-swe-agent: adapter

ENV_CLASS = "afb_msa.environment.AfbSandboxEnvironment"
# The bash command the environment class maps to the read-only status tool (submission_status).
MINI_STATUS_COMMAND = "afb-submission-status"


class MiniSweAgentAdapter:
    """`mini-swe-agent:<name>`: the `mini` command of the pinned package, unmodified.

    Its model is litellm's OpenAI client at the attempt's model proxy (OPENAI_BASE_URL); its
    environment class (subjects/mini-swe-agent/afb_msa) runs every bash action in the sandbox
    through the tool interposer and maps the submit command to the irreversible tool.
    """

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


register_adapter("reference", ReferenceAdapter())
register_adapter("command", CommandAdapter())
register_adapter("mini-swe-agent", MiniSweAgentAdapter())
