"""The result-schema versions an earlier evaluator may have hashed into a policy, and the check
that a spec's policy is the frozen one under some of them (what a regrade may waive).

Below results.py and regrade.py, which both ask it: a regrade record is honoured on re-derivation
only when the policy matches, and a regrade is made only then.
"""

from __future__ import annotations

import itertools

from runner.evaluator.core.canonical import digest
from runner.evaluator.protocol.identities import SCHEMA_VERSIONS, policy_body
from runner.evaluator.protocol.runfile import RunProtocol

# Result-schema versions an earlier evaluator may have hashed into a policy (the policy's own
# schema and the evidence's are not relaxed: those would change what the rules mean).
RESULT_SCHEMAS = {
    "proof": ("afb.proof/1", "afb.proof/2", "afb.proof/3"),
    "scorecard": ("afb.scorecard/1", "afb.scorecard/2", "afb.scorecard/3"),
    "report": ("afb.report/1", "afb.report/2"),
}


def policy_matches(rp: RunProtocol) -> bool:
    """The spec's policy hashes to the recorded policy_hash under some known result-schema
    versions: the rules are the frozen ones, only the result documents' versions moved."""
    body = policy_body(rp.spec())
    for versions in itertools.product(*RESULT_SCHEMAS.values()):
        schemas = {**SCHEMA_VERSIONS, **dict(zip(RESULT_SCHEMAS, versions, strict=True))}
        if digest({**body, "schema_versions": schemas}) == rp.identities.policy_hash:
            return True
    return False
