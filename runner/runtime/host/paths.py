"""Every host path the runtime creates or reads, in one place.

Runtime state lives under /run/afb (tmpfs: gone after a reboot, like the processes it
describes); subject state directories under /var/tmp (the subject, `nobody`, must reach them
through a path it can traverse). `sweep` removes per-run entries of these folders by run id,
so a folder added here that holds per-run state must be added to `sweep.STATE_ROOTS` too.
"""

from __future__ import annotations

from pathlib import Path

RUN_ROOT = Path("/run/afb")
LOCK_DIR = RUN_ROOT / "locks"  # one advisory lock per live run (naming.hold_run)
NETNS_ALLOC_LOCK = LOCK_DIR / "netns-alloc.lock"  # serialises netns index allocation
# Per-run state of the run's sandbox backend, whichever it is (Podman: its private service's
# socket, storage and log), named by run id.
SANDBOX_ROOT = RUN_ROOT / "sandbox"
LEGACY_PODMAN_ROOT = RUN_ROOT / "podman"  # where runners before 2026-12-07 kept it (swept)
SUBJECTS_PUBLIC_DIR = RUN_ROOT / "subjects"  # world-readable subject programs (run as nobody)
SUBJECT_ROOT = Path("/var/tmp/afb-subjects")  # per-run subject state directories
NETNS_DIR = Path("/var/run/netns")  # where `ip netns` keeps named namespaces

# containers.conf, read (never written) to check the ulimits the sandboxes need
CONTAINERS_CONF_FILES = (
    Path("/usr/share/containers/containers.conf"),
    Path("/etc/containers/containers.conf"),
)
CONTAINERS_CONF_DIR = Path("/etc/containers/containers.conf.d")
