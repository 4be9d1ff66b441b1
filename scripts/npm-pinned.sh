# Sourced by scripts/setup-claude-code.sh and scripts/setup-codex.sh: fetch one npm package by
# `npm pack` (npm's configured registry; npm installed from Debian when missing), check the
# tarball against its pinned sha512 integrity (the registry's own `dist.integrity`), and unpack
# it into a directory (package/...). Stops the setup, naming the tool, on any mismatch.
#   npm_pinned_fetch TOOL PKG_SPEC INTEGRITY DIR
npm_pinned_fetch() {
  local tool=$1 spec=$2 integrity=$3 dir=$4 tgz sum
  if ! command -v npm >/dev/null; then
    printf '%s: %s\n' "$tool" "installing npm"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm
  fi
  (cd "$dir" && npm pack --silent --ignore-scripts "$spec" >/dev/null)
  tgz=$(find "$dir" -maxdepth 1 -name '*.tgz' | head -n 1)
  [ -n "$tgz" ] || { echo "$tool: npm pack $spec produced no tarball" >&2; exit 1; }
  sum=$(python3 -c 'import base64,hashlib,sys; print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$tgz")
  [ "$sum" = "$integrity" ] || { echo "$tool: $tgz is $sum, pinned $integrity" >&2; exit 1; }
  tar -xzf "$tgz" -C "$dir" --no-same-owner
  rm -f "$tgz"
}
