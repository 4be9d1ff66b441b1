"""The tasks of both domains, extracted from the pinned wheel and checked by replay.

A task is kept when its expected actions include at least one write and every expected write
commits on the pristine database (the gold replay: tau2's own grading rule replays them and
hashes the DB). Expected reads may fail (several retail tasks first look a user up by a wrong
email, as the simulated user would) exactly as in tau2's gold run. A task whose expected write
is refused on the pristine DB is excluded with that refusal as the named reason.

Each kept task's gold state hash is that replay's `Store.state_hash()`; its expected ledger
(the intents its writes commit) is the baseline duplicates are counted against.
"""

from __future__ import annotations

import ast
import json
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from runner.benchmarks.tau_lite import domains, wheel
from runner.benchmarks.tau_lite.schema import SchemaError
from runner.benchmarks.tau_lite.store import Store

REPLAY_SCOPE = "gold"


class _Upstream(BaseModel):
    # tau2's task format carries more than this harness uses: a projection, so extra keys
    # are ignored (the wheel is pinned by hash, so what it holds does not drift)
    model_config = ConfigDict(extra="ignore", frozen=True)


class Instructions(_Upstream):
    reason_for_call: str
    known_info: str | None = None
    task_instructions: str
    unknown_info: str | None = None


class UserScenario(_Upstream):
    instructions: Instructions


class Action(_Upstream):
    action_id: str
    name: str
    arguments: dict[str, Any]
    requestor: str | None = None


class Criteria(_Upstream):
    actions: list[Action] | None = None
    nl_assertions: list[str] | None = None


class Description(_Upstream):
    purpose: str | None = None
    notes: str | None = None


class Task(_Upstream):
    id: str
    description: Description | None = None
    user_scenario: UserScenario
    evaluation_criteria: Criteria


@dataclass(frozen=True)
class TauTask:
    domain: str
    task: Task
    gold_hash: str
    expected_intents: Counter[str]  # intents the expected writes commit (changing the state)

    @property
    def id(self) -> str:
        return f"{self.domain}-{self.task.id}"

    @property
    def actions(self) -> list[Action]:
        return list(self.task.evaluation_criteria.actions or [])

    @property
    def writes(self) -> list[Action]:
        names = set(domains.write_tools(self.domain))
        return [a for a in self.actions if a.name in names]


@dataclass
class DomainSet:
    domain: str
    policy: str
    pristine: Path  # the pristine store (a template: copied per attempt, never written)
    pristine_hash: str
    tasks: dict[str, TauTask] = field(default_factory=dict)  # by TauTask.id
    excluded: dict[str, str] = field(default_factory=dict)  # task id -> why


def airports(wheel_path: Path) -> list[dict[str, str]]:
    """The airport list of tau2's `list_all_airports`, read from the wheel's tools.py."""
    src = wheel.read_member(wheel_path, "tau2/domains/airline/tools.py").decode()
    out = []
    for node in ast.walk(ast.parse(src)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "AirportCode"
        ):
            kw = {k.arg: k.value for k in node.keywords}
            iata, city = kw.get("iata"), kw.get("city")
            if isinstance(iata, ast.Constant) and isinstance(city, ast.Constant):
                out.append({"iata": str(iata.value), "city": str(city.value)})
    if not out:
        raise wheel.WheelError(f"{wheel_path}: no AirportCode list in airline/tools.py")
    return out


def tool_docs(wheel_path: Path, domain: str) -> dict[str, str]:
    """Each tool's docstring as tau2 ships it (the agent's tool descriptions; not re-typed)."""
    src = wheel.read_member(wheel_path, f"tau2/domains/{domain}/tools.py").decode()
    names = set(domains.TOOLS[domain])
    docs = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            docs[node.name] = ast.get_docstring(node) or ""
    return docs


def build_domain(wheel_path: Path, domain: str, workdir: Path) -> DomainSet:
    """The pristine store of `domain` under `workdir` and its kept tasks (replayed there)."""
    data = wheel.load_domain(wheel_path, domain)
    meta = {
        "wheel_sha256": wheel.sha256_file(wheel_path),
        "airports": json.dumps(airports(wheel_path)) if domain == "airline" else "[]",
    }
    workdir.mkdir(parents=True, exist_ok=True)
    pristine = workdir / f"{domain}.pristine.db"
    try:
        store = Store.create(pristine, domain, data.db, meta)
    except SchemaError as exc:
        raise wheel.WheelError(f"{wheel_path}: {exc}") from None
    out = DomainSet(domain, data.policy, pristine, store.state_hash())
    if not isinstance(data.tasks, list):
        raise wheel.WheelError(f"{wheel_path}: {domain}/tasks.json is not a list of tasks")
    for i, raw in enumerate(data.tasks):
        try:
            task = Task.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise wheel.WheelError(
                f"{wheel_path}: {domain}/tasks.json[{i}].{where}: {first['msg']}"
            ) from None
        tid = f"{domain}-{task.id}"
        writes = set(domains.write_tools(domain))
        if not any(a.name in writes for a in task.evaluation_criteria.actions or []):
            out.excluded[tid] = "no write action"
            continue
        replay = workdir / f"{tid}.replay.db"
        copy = store.copy_to(replay)
        try:
            refused = None
            for a in task.evaluation_criteria.actions or []:
                o = domains.call(copy, a.name, a.arguments, scope=REPLAY_SCOPE)
                if not o.ok and a.name in writes:
                    refused = f"expected write {a.action_id} {a.name} refused: {o.error}"
                    break
            if refused:
                out.excluded[tid] = refused
                continue
            intents = Counter(
                r["intent"]
                for r in copy.ledger(REPLAY_SCOPE)
                if r["outcome"] == "committed" and r["changed"]
            )
            out.tasks[tid] = TauTask(domain, task, copy.state_hash(), intents)
        finally:
            copy.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{replay}{suffix}").unlink(missing_ok=True)
    store.close()
    return out


def build(wheel_path: Path, workdir: Path | None = None) -> dict[str, DomainSet]:
    """Both domains from a verified wheel (`wheel.verify` / `wheel.fetch` first)."""
    wheel.verify(wheel_path)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="tau-lite-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return {d: build_domain(wheel_path, d, workdir) for d in wheel.DOMAINS}
