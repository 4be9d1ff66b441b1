#!/usr/bin/env bash
# One-step setup of agent-fault-bench on a fresh Debian 12 / Ubuntu 24.04 machine, as root.
# Idempotent: safe to run again; only installs or builds what is missing.
#   1. system packages (Podman with runc and explicit ulimits, nftables, iproute2, mmdebstrap,
#      nix-bin for the evaluator-digest cross-check), via scripts/setup-runtime.sh
#   2. uv (pinned) in .tools/, then the locked Python environment in .venv/ (uv.lock, --frozen)
#   3. the swe-lite sandbox image, built reproducibly from images/swe-lite when missing
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
UV_VERSION=0.13.9

log() { printf 'setup: %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "setup: must run as root" >&2; exit 1; }

need=()
for p in python3 python3-venv mmdebstrap nix-bin ca-certificates chromium chromium-driver; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  log "installing: ${need[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi
bash scripts/setup-runtime.sh

if [ ! -x .tools/bin/uv ] || [ "$(.tools/bin/uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  log "installing uv $UV_VERSION into .tools/"
  python3 -m venv .tools
  .tools/bin/pip install -q "uv==$UV_VERSION"
fi
export UV_PYTHON_DOWNLOADS=never
.tools/bin/uv sync --frozen --quiet
log "python environment ready in .venv/ ($(.venv/bin/python --version))"

if [ "${AFB_SKIP_IMAGE:-0}" != 1 ]; then
  .venv/bin/bench images build images/swe-lite --if-missing
fi

# Third-party subjects' own locked environments (docs/SUBJECTS.md): built with `uv sync --frozen`
# from subjects/<name>/uv.lock into /var/lib/afb/subject-envs/<name>-<digest>, outside .venv.
for project in subjects/*/; do
  [ -f "$project/uv.lock" ] || continue
  .venv/bin/bench subjects build "${project%/}"
done
bash scripts/setup-claude-code.sh  # Claude Code (pinned native binary) for tests/subjects
bash scripts/setup-codex.sh  # Codex CLI (pinned static binary) for tests/subjects
log "done"
