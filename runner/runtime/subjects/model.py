"""A subject's model section checked against the files and the host env: the proxy plan per task.

Shared by the adapters whose subjects talk to a model (command:, mini-swe-agent:, reference:
with `model`): the cassettes folder must hash to the declared `model.digest`, hold one cassette
per task of the kind the mode serves (runner/runtime/cassettes/), and live/record modes need
their upstream key in the harness's environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from runner.evaluator.core.errors import InputError
from runner.runtime.attempt.api import ModelProxyPlan
from runner.runtime.cassettes.load import load_cassette
from runner.runtime.cassettes.policy import PolicyCassette, check_policy
from runner.runtime.subjects.config import ModelSection
from runner.runtime.subjects.registry import ResolveContext
from runner.runtime.subjects.tree import tree_digest


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
