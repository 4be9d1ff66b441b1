"""`bench env observe | check`: this machine's execution-environment artifact under a policy (the
spec's [[factors]] and [[sources]], or the default policy), and the conformance proof of
artifacts read from files. The command only displays them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from runner.evaluator.core.bounded import JSON_INPUT_CAP, read_bounded
from runner.evaluator.core.canonical import parse_json
from runner.evaluator.core.errors import InputError
from runner.evaluator.environment.artifact import (
    EnvironmentPolicy,
    ExecutionEnvironment,
    load_default_policy,
    load_environment,
    policy_of,
)
from runner.evaluator.environment.conformance import EnvironmentConformanceProof, check_environments
from runner.evaluator.protocol.specload import load_spec

Purpose = Literal["cross_subject", "overhead_pair"]


def policy(spec: Path | None) -> EnvironmentPolicy:
    if spec is None:
        return load_default_policy()
    s = load_spec(spec)
    return policy_of(s.factors, s.sources)


def spec_image(spec: Path) -> str | None:
    """The tag of the spec's sandbox image (derived from its declared inputs; not built here)."""
    from runner.evaluator.core.inputs import project_root
    from runner.imagebuild.builder import image_tag

    name = load_spec(spec).grader.image
    return None if name is None else image_tag(project_root() / "images" / name)


def load_artifact(path: Path) -> ExecutionEnvironment:
    try:
        data = read_bounded(path, JSON_INPUT_CAP)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    try:
        obj = parse_json(data)
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc}", file=str(path)) from exc
    try:
        return load_environment(obj)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"]) or None
        raise InputError(
            f"not an execution-environment artifact: {e['msg']}", file=str(path), key=where
        ) from exc


def observe(
    spec: Path | None, *, http_base: str | None = None, image: str | None = None
) -> ExecutionEnvironment:
    """`bench env observe`: this machine under the policy; a podman source's image defaults to
    the spec's [grader].image by its input-derived tag."""
    from runner.runtime.envcollect import observe as observe_machine

    if image is None and spec is not None:
        image = spec_image(spec)
    return observe_machine(policy(spec), http_base=http_base, image=image)


def check(
    artifacts: list[Path], spec: Path | None, purpose: str = "cross_subject"
) -> EnvironmentConformanceProof:
    """`bench env check`: the conformance proof of the artifacts under the policy."""
    if purpose not in ("cross_subject", "overhead_pair"):
        raise InputError(
            f"--purpose must be cross_subject or overhead_pair (got {purpose!r})", key="purpose"
        )
    chosen: Purpose = "overhead_pair" if purpose == "overhead_pair" else "cross_subject"
    pol = policy(spec)
    envs = [load_artifact(p) for p in artifacts]
    return check_environments(envs, pol.factors, pol.sources, purpose=chosen)
