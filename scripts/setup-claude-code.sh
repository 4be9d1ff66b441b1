#!/usr/bin/env bash
# Install Claude Code (pinned) for the subject test tests/subjects/test_claude_code.py, as root.
# Idempotent: does nothing when the pinned binary is already in place.
#
# Claude Code ships as a native binary per platform in npm packages
# (@anthropic-ai/claude-code-<platform>, the optionalDependencies of @anthropic-ai/claude-code).
# The wrapper package needs node >= 22; the native binary needs no node at all, so only the
# platform package is fetched (`npm pack`, from npm's configured registry), checked against its
# pinned sha512 integrity (the registry's own `dist.integrity` of that version), and unpacked. It is
# world-readable (the subject runs as an unprivileged uid) and lands atomically in
#   /var/lib/afb/claude-code/<version>/bin/claude
set -euo pipefail
. "$(dirname "$0")/npm-pinned.sh"
VERSION=2.1.328
ROOT=${AFB_CLAUDE_CODE_ROOT:-/var/lib/afb/claude-code}
DEST="$ROOT/$VERSION"

log() { printf 'setup-claude-code: %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "setup-claude-code: must run as root" >&2; exit 1; }

case "$(uname -m)" in
  x86_64)
    PLATFORM=linux-x64
    INTEGRITY='sha512-KuzL+dBHgDCFTHJxwW+xuBJdVKfBsesGx2BBcTOG9sYDGoAD7b1hUV8rsTS4xjoJsB2SmeGraGjBiFuhrYuC9w==' ;;
  aarch64)
    PLATFORM=linux-arm64
    INTEGRITY='sha512-zeWsClzx/rli8q6RsngKisu5BnuZ41J7Htp0qgsdZomaJCINiksf+mewQ/gyaylKajBZCoE9Z8R+OkLMjIkJig==' ;;
  *) echo "setup-claude-code: no pinned Claude Code build for $(uname -m)" >&2; exit 1 ;;
esac
PKG="@anthropic-ai/claude-code-$PLATFORM"

if [ -x "$DEST/bin/claude" ] && [ "$("$DEST/bin/claude" --version 2>/dev/null | cut -d' ' -f1)" = "$VERSION" ]; then
  log "Claude Code $VERSION present in $DEST"
  exit 0
fi

mkdir -p "$ROOT"
chmod 755 "$ROOT"
tmp=$(mktemp -d "$ROOT/.install-$VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "fetching $PKG@$VERSION (npm pack, the configured registry)"
npm_pinned_fetch setup-claude-code "$PKG@$VERSION" "$INTEGRITY" "$tmp"
mkdir -p "$tmp/bin"
ln -s ../package/claude "$tmp/bin/claude"
chmod -R a+rX "$tmp"
got=$("$tmp/bin/claude" --version | cut -d' ' -f1)
[ "$got" = "$VERSION" ] || { echo "setup-claude-code: installed binary says $got" >&2; exit 1; }
rm -rf "$DEST"
mv "$tmp" "$DEST"
trap - EXIT
log "Claude Code $VERSION installed in $DEST"
