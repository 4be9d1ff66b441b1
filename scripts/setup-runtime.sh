#!/usr/bin/env bash
# Idempotent runtime setup for agent-fault-bench on Debian 12 / Ubuntu (run as root).
#
# - installs podman (+ runc), nftables, iproute2, busybox-static (test image), coreutils
# - pins podman to runc and explicit ulimits: crun fails on hybrid cgroups here, and the
#   default nofile limit exceeds the hard limit of a process without CAP_SYS_RESOURCE
# - verifies `podman run --network none --cap-drop all` with a locally built busybox image
#   (no registry access needed)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
CONF=/etc/containers/containers.conf.d/50-afb.conf
PKGS=(podman runc conmon nftables iproute2 busybox-static coreutils tar)
CHECK_IMAGE=localhost/afb-setup-check:1

log() { printf 'setup-runtime: %s\n' "$*"; }
die() { printf 'setup-runtime: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"

# 1. packages (only touch apt when something is missing)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing: ${missing[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "packages present"
fi
for t in podman runc nft ip busybox env tar; do
  command -v "$t" >/dev/null || die "$t not on PATH after install"
done
env -C / true 2>/dev/null || die "coreutils env lacks -C (need coreutils >= 8.28)"

# 2. containers.conf drop-in: explicit ulimits no higher than this shell's hard limits
limit() { # $1 = current hard limit ("unlimited" or a number); cap at 4096
  if [ "$1" = unlimited ] || [ "$1" -gt 4096 ]; then echo 4096; else echo "$1"; fi
}
nofile=$(limit "$(ulimit -Hn)")
nproc=$(limit "$(ulimit -Hu)")
want=$(cat <<EOF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
)
mkdir -p "$(dirname "$CONF")"
if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$want" ]; then
  log "$CONF up to date"
else
  printf '%s\n' "$want" > "$CONF.tmp"
  mv "$CONF.tmp" "$CONF"
  log "wrote $CONF (nofile=$nofile nproc=$nproc)"
fi

# 3. kernel features: netns + nftables
nft list tables >/dev/null || die "nftables not usable (kernel module nf_tables?)"
mkdir -p /run/netns /run/afb/locks

# 4. verify podman end to end with a local busybox image
runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}')
[ "$runtime" = runc ] || die "podman OCI runtime is '$runtime', expected runc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; podman rmi -f "$CHECK_IMAGE" >/dev/null 2>&1 || true' EXIT
mkdir -p "$tmp/rootfs/bin"
cp /bin/busybox "$tmp/rootfs/bin/busybox"
ln -s busybox "$tmp/rootfs/bin/sh"
ln -s busybox "$tmp/rootfs/bin/cat"
tar -C "$tmp/rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -cf "$tmp/rootfs.tar" .
podman import -q "$tmp/rootfs.tar" "$CHECK_IMAGE" >/dev/null
out=$(podman run --rm --network none --cap-drop all "$CHECK_IMAGE" \
  /bin/sh -c 'cat /proc/net/dev | tail -n +3 | cut -d: -f1; grep CapEff /proc/1/status')
echo "$out" | grep -q 'lo' || die "podman run failed: $out"
echo "$out" | grep -q 'CapEff:.0000000000000000' || die "capabilities not dropped: $out"
log "podman run OK (runtime=runc, nofile=$nofile, nproc=$nproc)"
