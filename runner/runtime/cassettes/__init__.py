"""The model proxy's cassettes: the format (format.py) and policy cassettes (policy.py).

Runtime only, like the subject adapters that check them (runner/runtime/subjects/); their JSON
Schemas are written beside them (schemas/ here, `bench schema`)."""
