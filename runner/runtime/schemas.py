"""The runtime's JSON Schemas, written beside the models they describe (`bench schema`).

Subject config grammars (one per registered adapter, `subject-<prefix>-config`) and the subject
env go to runner/runtime/subjects/schemas/, the cassette formats to
runner/runtime/cassettes/schemas/. Outside `schemas/` on purpose: that folder is an evaluator
input, and these are not read by any evaluator decision.
"""

from __future__ import annotations

from pydantic import BaseModel

SUBJECT_SCHEMAS = "runner/runtime/subjects/schemas"
CASSETTE_SCHEMAS = "runner/runtime/cassettes/schemas"


def runtime_schema_sets() -> dict[str, dict[str, type[BaseModel]]]:
    """Folder (relative to the checkout) -> schema name -> model."""
    from runner.runtime.cassettes.format import Cassette
    from runner.runtime.cassettes.policy import PolicyCassette
    from runner.runtime.subjects.config import SubjectEnv
    from runner.runtime.subjects.registry import config_models

    subjects: dict[str, type[BaseModel]] = {
        f"subject-{prefix}-config": model for prefix, model in config_models().items()
    }
    subjects["subject-env"] = SubjectEnv  # the environment a subject is given (contract v1)
    return {
        SUBJECT_SCHEMAS: subjects,
        CASSETTE_SCHEMAS: {
            "model-cassette": Cassette,  # the model proxy's recorded / scripted answers
            "model-policy-cassette": PolicyCassette,  # answers chosen by rules over the request
        },
    }
