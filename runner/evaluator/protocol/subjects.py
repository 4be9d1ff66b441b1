"""What the evaluator itself decides about subjects: each one's role, and the model tool's name.

Everything else about a subject is runtime (runner/runtime/subjects/: the adapters, their config
grammars, the cassette format): the evaluator treats a `[[subjects]]` config as opaque data, its
identity the digest of the agent + config as declared (`subject_config_hash`, matrix.py), so a
new adapter or cassette version does not move `evaluator_digest`.
"""

from __future__ import annotations

from typing import Literal

MODEL_TOOL = "model"  # model calls through the proxy are this tool for triggers and ordinals

# A subject's role: `reference:` subjects are oracles (they are given the known answer through
# their own channel, so their result validates the benchmark, it does not rank an agent); every
# other adapter's subject is an agent, given the agent view only. Recorded in protocol.json and in
# each scorecard.
SubjectRole = Literal["oracle", "agent"]
ORACLE_ADAPTERS = frozenset({"reference"})


def subject_role(agent: str) -> SubjectRole:
    """The role of a `[[subjects]].agent` (`<adapter>:<name>`): oracle or agent."""
    return "oracle" if agent.partition(":")[0] in ORACLE_ADAPTERS else "agent"
