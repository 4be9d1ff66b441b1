#!/usr/bin/env bash
# Build (if missing) and load the reproducible swe-lite sandbox image into Podman.
#   scripts/build-swe-lite-image.sh          # ensure: build only when the tag is missing
#   scripts/build-swe-lite-image.sh --force  # rebuild and reload
# Needs root, podman and mmdebstrap; the Debian mirror comes from the host's apt config and
# the pinned sdists are fetched by name with pip into $AFB_CACHE
# (default ~/.cache/agent-fault-bench/sources).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mmdebstrap >/dev/null || { apt-get update -q && apt-get install -y -q mmdebstrap; }
if [ "${1:-}" = "--force" ]; then
  exec uv run bench images build images/swe-lite
fi
exec uv run bench images build images/swe-lite --if-missing
