"""Differential fuzz of the port against the real tau2 (NOT run by the suite: needs tau2).

Random sequences of tool calls (every task's expected calls, repeated, reordered, with
arguments perturbed) run both in tau2 (`Environment.make_tool_call`) and in the port on its
SQLite store; after every call the outcome (ok, or the error message) and the DB hash must
agree. Run in the scratch venv of gen_tau2_reference.py, from the checkout root:

    PYTHONPATH=. /tmp/tau2venv/bin/python tests/tau_lite/difffuzz_tau2.py WHEEL SEQUENCES [SEED]

It prints each divergence (domain, call, tau2's outcome, the port's) and a summary line.
"""

from __future__ import annotations

import copy
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any


def perturb(rng: random.Random, args: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(args)
    if not out:
        return out
    key = rng.choice(sorted(out))
    v = out[key]
    if isinstance(v, bool):
        out[key] = not v
    elif isinstance(v, int | float):
        out[key] = rng.choice([0, 1, v + 1, v - 1, v * 2])
    elif isinstance(v, str):
        out[key] = rng.choice([v + "X", v.upper(), "", "no longer needed", "economy", "gold"])
    elif isinstance(v, list) and v:
        out[key] = rng.choice([[], v[:1], v + v[:1], list(reversed(v))])
    return out


def main(wheel_path: Path, n: int, seed: int) -> int:
    from loguru import logger
    from pydantic import ValidationError

    logger.remove()
    from tau2.domains.airline import environment as airline_env
    from tau2.domains.retail import environment as retail_env

    from runner.benchmarks.tau_lite import domains, tasks, wheel

    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="tau-diff-"))
    sets = tasks.build(wheel_path, workdir)
    envs = {"airline": airline_env, "retail": retail_env}
    divergences = calls = 0
    for i in range(n):
        domain = rng.choice(list(wheel.DOMAINS))
        raw = [
            a
            for t in wheel.load_domain(wheel_path, domain).tasks
            for a in t["evaluation_criteria"]["actions"] or []
        ]
        seq = []
        for _ in range(rng.randint(1, 10)):
            a = rng.choice(raw)
            args = a["arguments"] if rng.random() < 0.6 else perturb(rng, a["arguments"])
            seq.append((a["name"], args))
            if rng.random() < 0.3:
                seq.append((a["name"], args))  # a blind retry
        env = envs[domain].get_environment()
        from runner.benchmarks.tau_lite.store import Store

        src = Store(sets[domain].pristine)
        store = src.copy_to(workdir / f"d{i}.db")
        src.close()
        for name, args in seq:
            calls += 1
            misfit = False  # tau2 failed on the arguments' shape: the port words that itself
            try:
                env.make_tool_call(name, requestor="assistant", **copy.deepcopy(args))
                theirs = "ok"
            except ValidationError as exc:
                theirs, misfit = f"error: {exc}", True
            except ValueError as exc:
                theirs = f"error: {exc}"
            except Exception as exc:
                theirs, misfit = f"error: {type(exc).__name__}: {exc}", True
            out = domains.call(store, name, copy.deepcopy(args), scope="d")
            ours = "ok" if out.ok else f"error: {out.error}"
            same_outcome = (theirs == "ok") == out.ok and (out.ok or misfit or theirs == ours)
            same_state = env.get_db_hash() == store.state_hash()
            if not (same_outcome and same_state):
                divergences += 1
                print(
                    json.dumps(
                        {
                            "domain": domain,
                            "call": name,
                            "args": args,
                            "tau2": theirs,
                            "port": ours,
                            "same_state": same_state,
                        },
                        default=str,
                    )[:3000],
                    flush=True,
                )
                break  # the states differ from here on: next sequence
        store.close()
        if i % 20 == 19:
            print(f"... {i + 1} sequences, {calls} calls, {divergences} divergences", flush=True)
    print(f"{n} sequences, {calls} calls, {divergences} divergences")
    return 1 if divergences else 0


if __name__ == "__main__":
    sys.exit(
        main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    )
