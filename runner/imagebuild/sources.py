"""Task sources of an image: sdists pinned by name and sha256, fetched with pip into a cache,
verified, and extracted without escaping their folder (image.toml's `sources` manifest)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Cache and task sources


def cache_dir() -> Path:
    """Directory of fetched sdists: ``$AFB_CACHE`` or ``~/.cache/agent-fault-bench/sources``."""
    env = os.environ.get("AFB_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "agent-fault-bench" / "sources"


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One pinned upstream sdist from ``sources.toml``."""

    ref: str
    name: str
    version: str
    filename: str
    sha256: str
    root: str
    pythonpath: str = "."

    def as_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def load_sources(manifest: Path) -> dict[str, SourceSpec]:
    """Parse a ``sources.toml`` manifest into ``{ref: SourceSpec}``, validating each entry."""
    data = tomllib.loads(Path(manifest).read_text(encoding="utf-8"))
    out: dict[str, SourceSpec] = {}
    for raw in data.get("source", []):
        spec = SourceSpec(**raw)
        if spec.ref != f"{spec.name}=={spec.version}":
            raise ValueError(f"{manifest}: ref {spec.ref!r} must be NAME==VERSION")
        if not re.fullmatch(r"[0-9a-f]{64}", spec.sha256):
            raise ValueError(f"{manifest}: {spec.ref}: sha256 must be 64 lowercase hex digits")
        if "/" in spec.root or spec.root in ("", ".", ".."):
            raise ValueError(f"{manifest}: {spec.ref}: root must be a single path component")
        if spec.ref in out:
            raise ValueError(f"{manifest}: duplicate ref {spec.ref}")
        out[spec.ref] = spec
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class FetchError(RuntimeError):
    """A pinned file could not be fetched: no pip, pip failed, or it hashed to another sha256."""


def pip_command(what: str) -> list[str]:
    """A pip to download with: ``$AFB_PIP``, this interpreter's pip, one on PATH, or uv's."""
    if os.environ.get("AFB_PIP"):
        return shlex.split(os.environ["AFB_PIP"])
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    if shutil.which("uv"):
        return ["uv", "tool", "run", "pip"]
    raise FetchError(f"no pip found to fetch {what} (set AFB_PIP)")


def fetch_pinned(
    ref: str,
    filename: str,
    sha256: str,
    *,
    binary: bool,
    cache: Path | None = None,
    verify: Callable[[Path], object] | None = None,
) -> Path:
    """The cached, sha256-verified ``filename`` of ``ref`` (``NAME==VERSION``), downloaded with
    ``pip download --no-deps`` into ``cache`` when absent or not the pinned file.

    ``binary`` picks a wheel (``--only-binary``) or an sdist (``--no-binary``). ``verify``
    checks the download (raising the caller's own error, naming its file); without it a
    mismatch is a FetchError naming ``ref``. Nothing unverified is left in the cache."""
    cache = cache or cache_dir()
    dest = cache / filename
    if dest.exists():
        if sha256_file(dest) == sha256:
            return dest
        dest.unlink()  # a corrupt or substituted file: fetch again, and verify what comes
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp:
        cmd = [
            *pip_command(ref),
            "download",
            "--no-deps",
            "--only-binary" if binary else "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "-d",
            tmp,
            ref,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        files = [p for p in Path(tmp).iterdir() if p.is_file()]
        if proc.returncode != 0 or len(files) != 1:
            raise FetchError(f"fetching {ref} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        got = files[0]  # --no-deps: the one file; its hash, not its name, says it is the pin
        if verify is not None:
            verify(got)
        elif (digest := sha256_file(got)) != sha256:
            raise FetchError(f"{ref}: sha256 mismatch: got {digest}, pinned {sha256}")
        os.replace(got, dest)
    return dest


def fetch_source(spec: SourceSpec, cache: Path | None = None) -> Path:
    """Return the cached, sha256-verified sdist of ``spec``, downloading it with pip if needed."""
    return fetch_pinned(spec.ref, spec.filename, spec.sha256, binary=False, cache=cache)


def fetch_sources(
    manifest: Path, refs: Iterable[str] | None = None, cache: Path | None = None
) -> dict[str, Path]:
    """Fetch (or find in the cache) every source of ``manifest`` (or just ``refs``)."""
    specs = load_sources(manifest)
    wanted = list(refs) if refs is not None else sorted(specs)
    return {ref: fetch_source(specs[ref], cache) for ref in wanted}


def _safe_member_path(name: str) -> str | None:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def extract_source(sdist: Path, dest: Path) -> Path:
    """Extract an sdist under ``dest`` (regular files and dirs only, owned by the caller)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "r:*") as tar:
        for m in tar.getmembers():
            rel = _safe_member_path(m.name)
            if rel is None:
                continue
            target = dest / rel
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif m.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                assert src is not None
                with src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                target.chmod(0o755 if m.mode & 0o111 else 0o644)
    return dest
