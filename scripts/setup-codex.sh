#!/usr/bin/env bash
# Install Codex CLI (pinned) for the subject test tests/subjects/test_codex.py, as root.
# Idempotent: does nothing when the pinned binary is already in place.
#
# Codex CLI ships as a static (musl) native binary per platform in npm packages: the versions
# `<version>-linux-x64` / `<version>-linux-arm64` of @openai/codex (the wrapper version's
# optionalDependencies, under an alias). The wrapper is a node launcher; the binary needs no node
# at all, so only the platform package is fetched (`npm pack`, from npm's configured registry),
# checked against its pinned sha512 integrity (the registry's own `dist.integrity` of that
# version), and unpacked. It is world-readable (the subject runs as an unprivileged uid) and
# lands atomically in
#   /var/lib/afb/codex/<version>/bin/codex
set -euo pipefail
. "$(dirname "$0")/npm-pinned.sh"
VERSION=0.169.0
ROOT=${AFB_CODEX_ROOT:-/var/lib/afb/codex}
DEST="$ROOT/$VERSION"

log() { printf 'setup-codex: %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "setup-codex: must run as root" >&2; exit 1; }

case "$(uname -m)" in
  x86_64)
    PLATFORM=linux-x64
    INTEGRITY='sha512-o05NyAOCDygSPRo1yinzxvkRSdmsZyBD9E7mbpmjRanSfM8lypqWtQgEo4XfNkwhuCR2aFu8mlGOsQGFXVbVww==' ;;
  aarch64)
    PLATFORM=linux-arm64
    INTEGRITY='sha512-NZ/DaQUpcQmxmqee7Z9uC1rzw3GhSbooawcaTe1LN5Yk+WlinUKGdTXJgClRT/9ogQEEM9TWxYzvxPfj5G/xFg==' ;;
  *) echo "setup-codex: no pinned Codex CLI build for $(uname -m)" >&2; exit 1 ;;
esac
PKG="@openai/codex@$VERSION-$PLATFORM"

if [ -x "$DEST/bin/codex" ] && [ "$("$DEST/bin/codex" --version 2>/dev/null)" = "codex-cli $VERSION" ]; then
  log "Codex CLI $VERSION present in $DEST"
  exit 0
fi

mkdir -p "$ROOT"
chmod 755 "$ROOT"
tmp=$(mktemp -d "$ROOT/.install-$VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "fetching $PKG (npm pack, the configured registry; about 170 MB)"
npm_pinned_fetch setup-codex "$PKG" "$INTEGRITY" "$tmp"
# package/vendor/<target triple>/bin/codex (x86_64-unknown-linux-musl, aarch64-unknown-linux-musl)
bins=("$tmp"/package/vendor/*/bin/codex)
[ "${#bins[@]}" -eq 1 ] && [ -x "${bins[0]}" ] || { echo "setup-codex: no single vendor/*/bin/codex in $PKG" >&2; exit 1; }
mkdir -p "$tmp/bin"
ln -s "../${bins[0]#"$tmp/"}" "$tmp/bin/codex"
chmod -R a+rX "$tmp"
got=$("$tmp/bin/codex" --version)
[ "$got" = "codex-cli $VERSION" ] || { echo "setup-codex: installed binary says $got" >&2; exit 1; }
rm -rf "$DEST"
mv "$tmp" "$DEST"
trap - EXIT
log "Codex CLI $VERSION installed in $DEST"
