# Codex CLI as a benchmark subject (tests/subjects/test_codex.py passes this text to `/bin/sh -c`,
# so it is part of the subject's argv, hence of subject_config_hash).
#   $1: the codex binary; the rest: its options, the same on every launch.
# The harness relaunches the same argv after a kill, with AFB_RESTART_INDEX incremented and the
# state directory kept: the first launch starts a session with the task as the prompt, a relaunch
# resumes the newest session recorded under CODEX_HOME (in the state directory) with a short
# prompt (`codex exec resume` needs one). What is in the session is Codex's own doing.
set -eu
codex=$1
shift
export CODEX_HOME="$AFB_STATE_DIR/.codex"
mkdir -p "$CODEX_HOME"
# the addresses of this attempt, which a static config cannot name
set -- "$@" \
  -c "model_providers.afb.base_url=\"$OPENAI_BASE_URL\"" \
  -c "mcp_servers.afb.url=\"$AFB_MCP_URL\""
if [ "${AFB_RESTART_INDEX:-0}" -gt 0 ] &&
  [ -n "$(find "$CODEX_HOME/sessions" -name 'rollout-*.jsonl' 2>/dev/null | head -n 1)" ]; then
  exec "$codex" exec resume --last "$@" "You were interrupted. Continue the task." </dev/null
fi
exec "$codex" exec "$@" - <"$AFB_TASK_FILE" # the task (its agent view, JSON) is the prompt
