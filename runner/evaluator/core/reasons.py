"""Every reason code the evaluator's verdict and publication emit, by name.

A code is a stable token: proofs, terminal records and cell histories carry these bytes, so a
value here never changes. A code about one thing (a stratum, an observation, a result file) is
`code:detail` (see `qualified`); the code is the part before the first colon.

Codes decided elsewhere are catalogued beside their checks and pass through verbatim:
payload-shape codes in evidence/shape.py (inside `shape_check_failed` reasons), witness
predicate ids and `missing_observation:` / `wrong_collector:` / `collector_not_independent:` in
protocol/witness.py (behind `witness:`), environment conformance codes in
environment/conformance.py (behind `environment:`), and a harness error's own `stage` beside
`harness_error`.
"""

from __future__ import annotations

from runner.evaluator.core.types import Status


def qualified(code: str, detail: object) -> str:
    """`code:detail`: a code about one stratum, observation, lifecycle state or file."""
    return f"{code}:{detail}"


# ------------------------------------------------ one attempt (outcomes.attempt_status, _witness)

ATTEMPT_NOT_STARTED = "attempt_not_started"
ATTEMPT_NOT_ENDED = "attempt_not_ended"
HARNESS_ERROR = "harness_error"  # followed by each error record's stage
CONTRADICTORY_ATTEMPT_STARTED = "contradictory_attempt_started"
CONTRADICTORY_ATTEMPT_ENDED = "contradictory_attempt_ended"
CONTRADICTORY_GRADER_RESULTS = "contradictory_grader_results"
CONTRADICTORY_ACTUATOR_RECEIPTS = "contradictory_actuator_receipts"
CONTRADICTORY_TOOL_CALL_COUNTS = "contradictory_tool_call_counts"
INJECTION_IN_BASELINE = "injection_in_baseline"  # fault records in a baseline (kind none) attempt
TRIGGER_RECORD_MISSING = "trigger_record_missing"
INJECTION_WITHOUT_TRIGGER = "injection_without_trigger"
COMPLETED_WITHOUT_REACHING_TRIGGER = "completed_without_reaching_trigger"
FAILED_BEFORE_TRIGGER = "failed_before_trigger"
TRIGGER_FIRED_MORE_THAN_ONCE = "trigger_fired_more_than_once"
MISSING_GRADER_RESULT = "missing_grader_result"
SHAPE_CHECK_FAILED = "shape_check_failed"  # followed by the grade's shape-check codes
SCORER_VERSION_MISMATCH = "scorer_version_mismatch"
# why an injection is not witnessed
NO_WITNESS_CONTRACT = "no_witness_contract"
MISSING_ACTUATOR_RECEIPT = "missing_actuator_receipt"
ACTUATOR_NOT_APPLIED = "actuator_not_applied"
OBSERVATION_OF_OTHER_KIND = "observation_of_other_kind"
OBSERVATION_OUT_OF_ORDER = "observation_out_of_order"  # :<name>, against its contract phase
CONTRADICTORY_OBSERVATION = "contradictory_observation"  # :<observation name>
WITNESS = "witness"  # :<witness contract violation>
# the fault lifecycle (outcomes._lifecycle): order is by seq inside one journal
MISSING_LIFECYCLE = "missing_lifecycle"  # :scheduled | :armed | :injected | :witnessed | :settled
RECOVERY_BEFORE_WITNESS = "recovery_before_witness"  # recovered or released before witnessed
LIFECYCLE_REPEATED = "lifecycle_repeated"  # :<state>, written more than once
ARM_BEFORE_SCHEDULE = "arm_before_schedule"
INJECTION_BEFORE_ARM = "injection_before_arm"
WITNESS_BEFORE_INJECTION = "witness_before_injection"  # witnessed or rejected before injected
WITNESSED_AND_REJECTED = "witnessed_and_rejected"
WITNESS_REJECTED = "witness_rejected"  # the runtime's own witness check failed or timed out
RECOVERY_AFTER_REJECTION = "recovery_after_rejection"
LIFECYCLE_WITHOUT_TRIGGER = "lifecycle_without_trigger"  # :<state> past armed, trigger unreached

# ------------------------------------------------------------ one cell (outcomes.terminal_record)

NO_ATTEMPT = "no_attempt"
ATTEMPT_SEQUENCE_GAP = "attempt_sequence_gap"
ATTEMPT_CAP_EXCEEDED = "attempt_cap_exceeded"
ATTEMPT_SCHEDULE_MISMATCH = "attempt_schedule_mismatch"
ATTEMPT_AFTER_FINAL_OUTCOME = "attempt_after_final_outcome"
UNAUTHORIZED_RETRY = "unauthorized_retry"
RETRIES_UNFINISHED = "retries_unfinished"

# ----------------------------------------------------------------- a run (eligibility.evaluate_run)

PROTOCOL_INCONSISTENT = "protocol_inconsistent"
PROTOCOL_DRAFT = "protocol_draft"
EVALUATOR_MISMATCH = "evaluator_mismatch"
DUPLICATE_CELL = "duplicate_cell"
UNREGISTERED_CELL = "unregistered_cell"

# -------------------------------------------------------- a subject (eligibility.decide_subject)
# Besides these, a cell whose terminal status is not a subject outcome adds its status's code
# (STATUS_REASON) and its last attempt's reasons; every cell adds its own reasons. A
# SCENARIO_MISMATCH is a subject outcome: it adds no code, its stratum is listed in the proof's
# `scenario_mismatch_strata` and left out of comparisons (SCENARIO_MISMATCH_STRATUM).

MISSING_CELLS = "missing_cells"
INVALID_INJECTION = "invalid_injection"
HARNESS_INVALID = "harness_invalid"
STATUS_REASON = {
    Status.INVALID_INJECTION: INVALID_INJECTION,
    Status.HARNESS_INVALID: HARNESS_INVALID,
}
NOT_COMPARABLE = "not_comparable"  # :<stratum>
MISSING_STRATUM = "missing_stratum"  # :<stratum>
COVERAGE_BELOW_FLOOR = "coverage_below_floor"
STRATUM_BELOW_FLOOR = "stratum_below_floor"  # :<stratum>

# ------------------------------------------ environment conformance (environment/stage.py)

ENVIRONMENT = "environment"  # :<conformance reason code>
ENVIRONMENT_NOT_RECORDED = "environment_not_recorded"
ENVIRONMENT_ARTIFACT_INVALID = "environment_artifact_invalid"
ENVIRONMENT_ARTIFACT_MISMATCH = "environment_artifact_mismatch"
ENVIRONMENT_UNREADABLE = "environment_unreadable"  # :<result file>: <error>
ENVIRONMENT_MISSING = "environment_missing"  # :<result file>
ENVIRONMENT_MISSING_FOR_SOME_RESULTS = "environment_missing_for_some_results"

# ------------------------------------------------ a refused comparison (publish/compare.py)
# Printed, never written: a refused comparison writes no artifact. A stratum left out of a
# comparison that is built is written, in the comparison's `not_comparable_strata`.

SCENARIO_MISMATCH_STRATUM = "scenario_mismatch_stratum"  # :<stratum>

NEED_AT_LEAST_TWO_RESULTS = "need_at_least_two_results"
NOT_PUBLISHABLE = "not_publishable"  # :<result file>: <why>
SUPERSEDED = "superseded"  # :<result file>; the registry state of a retired scorecard
WITHDRAWN = "withdrawn"  # :<result file>
PROTOCOL_HASH_DIFFERS = "protocol_hash_differs"
CELL_SET_DIFFERS = "cell_set_differs"
SUBJECTS_NOT_DISTINCT = "subjects_not_distinct"
PROTOCOL_NOT_FROZEN = "protocol_not_frozen"  # also why the registry refuses a scorecard
