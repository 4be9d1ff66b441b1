"""Subject adapters: a spec's `[[subjects]].agent` (+ config) -> the command that launches it.

Runtime only. One adapter per module here (command.py, mini_swe_agent.py, reference.py), each
registering itself with registry.py on import; every module of this package but the shared ones
is imported on first use (as fault kinds are), so a new adapter is one new module and edits
nothing else. An adapter owns its config grammar (a pydantic model, exported as a JSON Schema
beside it: schemas/ here, `bench schema`). The evaluator treats a subject's config as opaque
data: `subject_config_hash` hashes it as declared; it is checked here, at `bench plan` and
`bench run` time, as input errors naming the spec's key.

Shared: config.py (the sections adapters have in common, the subject env), tree.py (a folder's
digest), model.py (a model section checked against its cassettes). The contract subjects launch
against is docs/SUBJECTS.md.
"""
