"""Collectors for controlled environment factors: read each source on this machine (DESIGN §7).

Every read yields a `ResponseSnapshot` (status, content type, redirect hops, body bytes, the scope
asked for, or the error that stopped it). The snapshot goes through the evaluator's shape check
(`runner.evaluator.shape.read_value`) before its value is believed; a failed read or a failed
shape becomes an observation with no value and the shape's reason codes, never a crash and never
a guess. `observe(policy)` returns the run's `ExecutionEnvironment` artifact.

Providers (a source contract's `provider` + `endpoint`):

- `python`: a fixed registry of in-process readers (`os.cpu_count`, `os.sched_getaffinity`,
  `platform.release`, `platform.python_implementation`, `platform.python_version`,
  `psutil.virtual_memory.total`, `calibration.sha256_64mib`).
- `command`: an allowlisted program run without a shell (`podman version --format json`, ...).
- `podman`: `podman <endpoint>` (e.g. `image inspect <ref>`). The argument `{image}` stands for
  the sandbox image this run uses (its tag, given to `observe(image=...)` by the orchestrator), so
  a spec can name "the run's image" although its tag is derived from its inputs; without one the
  read fails (no guess).
- `file`: a local file's bytes (e.g. `/proc/sys/kernel/osrelease`).
- `evaluator`: `runner.evaluator.inputs.evaluator_digest`.
- `http`: a GET with urllib; redirects are followed but every hop is recorded.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

from runner.evaluator.environment.artifact import (
    EnvironmentPolicy,
    ExecutionEnvironment,
    FactorObservation,
    ShapeRecord,
    SourceRef,
    load_default_policy,
    policy_of,
)
from runner.evaluator.environment.normalize import normalize
from runner.evaluator.evidence.shape import RedirectHop, ResponseSnapshot, ShapeVerdict, read_value
from runner.evaluator.protocol.spec import SourceContract, Spec

ALLOWED_COMMANDS = frozenset({"podman", "uname", "nproc", "getconf", "runc", "crun"})
COMMAND_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0
MAX_READ_BYTES = 16 * 1024 * 1024
CALIBRATION_BYTES = 64 * 1024 * 1024


def now_rfc3339() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text_snapshot(value: object) -> ResponseSnapshot:
    return ResponseSnapshot(body=str(value).encode("utf-8"))


def _failed(why: str, **extra: Any) -> ResponseSnapshot:
    return ResponseSnapshot(error=why, **extra)


# ------------------------------------------------------------------------------ python provider


def calibration_seconds(nbytes: int = CALIBRATION_BYTES) -> float:
    """Seconds to SHA-256 `nbytes` (1 MiB chunks of a fixed pattern), rounded to microseconds."""
    chunk = bytes(range(256)) * 4096
    h = hashlib.sha256()
    start = time.perf_counter()
    for _ in range(nbytes // len(chunk)):
        h.update(chunk)
    h.hexdigest()
    return round(time.perf_counter() - start, 6)


def _memory_total() -> int:
    import psutil  # type: ignore[import-untyped]

    return int(psutil.virtual_memory().total)


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


PYTHON_READERS: Mapping[str, Callable[[], object]] = {
    "os.cpu_count": lambda: os.cpu_count(),
    "os.sched_getaffinity": _affinity,
    "platform.release": platform.release,
    "platform.python_implementation": platform.python_implementation,
    "platform.python_version": platform.python_version,
    "psutil.virtual_memory.total": _memory_total,
    "calibration.sha256_64mib": calibration_seconds,
}


def read_python(endpoint: str) -> ResponseSnapshot:
    reader = PYTHON_READERS.get(endpoint)
    if reader is None:
        return _failed(f"unknown python endpoint {endpoint!r}; known: {sorted(PYTHON_READERS)}")
    try:
        value = reader()
    except Exception as exc:
        return _failed(f"{endpoint}: {type(exc).__name__}: {exc}")
    if value is None:
        return _failed(f"{endpoint} returned None")
    return _text_snapshot(value)


# ----------------------------------------------------------------------------- command provider


def read_command(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> ResponseSnapshot:
    if not argv:
        return _failed("empty command")
    if Path(argv[0]).name not in ALLOWED_COMMANDS or "/" in argv[0]:
        return _failed(f"command {argv[0]!r} is not allowed; allowed: {sorted(ALLOWED_COMMANDS)}")
    exe = shutil.which(argv[0])
    if exe is None:
        return _failed(f"{argv[0]}: not installed (not on PATH)")
    try:
        proc = subprocess.run(
            [exe, *argv[1:]], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return _failed(f"{shlex.join(argv)}: timed out after {timeout}s")
    except OSError as exc:
        return _failed(f"{shlex.join(argv)}: {exc.strerror or exc}")
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return _failed(f"{shlex.join(argv)}: exit status {proc.returncode}: {tail[0][:200]}")
    return ResponseSnapshot(body=proc.stdout[:MAX_READ_BYTES])


# -------------------------------------------------------------------------------- file provider


def read_file(path: str) -> ResponseSnapshot:
    try:
        with open(path, "rb") as fh:
            return ResponseSnapshot(body=fh.read(MAX_READ_BYTES + 1))
    except OSError as exc:
        return _failed(f"{path}: {exc.strerror or exc}")


# --------------------------------------------------------------------------- evaluator provider


def read_evaluator(endpoint: str) -> ResponseSnapshot:
    if endpoint != "runner.evaluator.inputs.evaluator_digest":
        return _failed(f"unknown evaluator endpoint {endpoint!r}")
    from runner.evaluator.core.inputs import evaluator_digest

    try:
        return _text_snapshot(evaluator_digest())
    except Exception as exc:
        return _failed(f"evaluator_digest: {type(exc).__name__}: {exc}")


# -------------------------------------------------------------------------------- http provider


class _RecordingRedirects(urllib.request.HTTPRedirectHandler):
    def __init__(self) -> None:
        self.hops: list[RedirectHop] = []

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        self.hops.append(RedirectHop(status=code, location=newurl))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def read_http(
    url: str,
    scope_param: str | None = None,
    timeout: float = HTTP_TIMEOUT_S,
    max_bytes: int = MAX_READ_BYTES,
) -> ResponseSnapshot:
    """GET `url`, following redirects but recording each hop; never raises for HTTP errors."""
    scope: str | None = None
    if scope_param is not None:
        values = parse_qs(urlsplit(url).query).get(scope_param, [])
        scope = values[0] if len(values) == 1 else None
    redirects = _RecordingRedirects()
    opener = urllib.request.build_opener(redirects)
    req = urllib.request.Request(url, method="GET", headers={"Accept": "application/json"})
    common: dict[str, Any] = {"requested_url": url, "requested_scope": scope}
    try:
        with opener.open(req, timeout=timeout) as resp:
            body = resp.read(max_bytes + 1)
            return ResponseSnapshot(
                status=resp.status,
                content_type=resp.headers.get("Content-Type"),
                final_url=resp.geturl(),
                redirects=tuple(redirects.hops),
                body=body,
                **common,
            )
    except urllib.error.HTTPError as exc:
        # A non-2xx answer is still an answer: its status decides, not an exception.
        body = exc.read(max_bytes + 1) if exc.fp is not None else b""
        return ResponseSnapshot(
            status=exc.code,
            content_type=exc.headers.get("Content-Type") if exc.headers else None,
            final_url=exc.geturl(),
            redirects=tuple(redirects.hops),
            body=body,
            **common,
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return _failed(f"GET {url}: {exc}", redirects=tuple(redirects.hops), **common)


# ------------------------------------------------------------------------------------- dispatch


IMAGE_ARG = "{image}"


def read_source(
    contract: SourceContract, http_base: str | None = None, image: str | None = None
) -> ResponseSnapshot:
    """Read one source contract on this machine; failures become snapshots with `error` set."""
    p, ep = contract.provider, contract.endpoint
    if p == "python":
        return read_python(ep)
    if p == "command":
        try:
            argv = shlex.split(ep)
        except ValueError as exc:
            return _failed(f"bad command line {ep!r}: {exc}")
        return read_command(argv)
    if p == "podman":
        try:
            argv = ["podman", *shlex.split(ep)]
        except ValueError as exc:
            return _failed(f"bad podman arguments {ep!r}: {exc}")
        if IMAGE_ARG in argv:
            if image is None:
                return _failed(f"{ep!r} names the run's sandbox image, but none was given")
            argv = [image if a == IMAGE_ARG else a for a in argv]
        return read_command(argv)
    if p == "file":
        return read_file(ep)
    if p == "evaluator":
        return read_evaluator(ep)
    if p == "http":
        url = urljoin(http_base, ep) if http_base else ep
        if urlsplit(url).scheme not in ("http", "https"):
            return _failed(f"{url!r} is not an http(s) URL (give a base URL for a path)")
        return read_http(url, contract.shape.scope_param, max_bytes=contract.shape.max_bytes)
    return _failed(f"unknown provider {p!r}")


def shape_record(verdict: ShapeVerdict) -> ShapeRecord:
    return ShapeRecord(
        ok=verdict.ok,
        reason_codes=verdict.reason_codes,
        details=verdict.details,
        body_sha256=verdict.body_sha256,
        body_bytes=verdict.body_bytes,
    )


def _as_policy(policy: EnvironmentPolicy | Spec | None) -> EnvironmentPolicy:
    if policy is None:
        return load_default_policy()
    if isinstance(policy, Spec):
        return policy_of(policy.factors, policy.sources)
    return policy


def observe(
    policy: EnvironmentPolicy | Spec | None = None,
    *,
    http_base: str | None = None,
    readers: Mapping[str, Callable[[SourceContract], ResponseSnapshot]] | None = None,
    only: Iterable[str] | None = None,
    image: str | None = None,
) -> ExecutionEnvironment:
    """Observe every controlled factor of `policy` (a spec, or the default policy) on this machine.

    `readers` overrides the read of given source ids (tests); `only` limits the factor ids read;
    `image` is the sandbox image (tag) a `podman` source's `{image}` argument names.
    Each source is read once even when several factors share it.
    """
    pol = _as_policy(policy)
    wanted = set(only) if only is not None else None
    started = now_rfc3339()
    cache: dict[str, tuple[ResponseSnapshot, str]] = {}
    observations: list[FactorObservation] = []
    for factor in pol.factors:
        if wanted is not None and factor.id not in wanted:
            continue
        contract = pol.source(factor.source)
        if contract.id not in cache:
            reader = (readers or {}).get(contract.id)
            snap = reader(contract) if reader else read_source(contract, http_base, image)
            cache[contract.id] = (snap, now_rfc3339())
        snap, at = cache[contract.id]
        observations.append(observation(factor.id, factor.type, factor.unit, contract, snap, at))
    return ExecutionEnvironment.build(started, pol.controlled_factors_hash(), observations)


def observation(
    factor_id: str,
    type_: Any,
    unit: str,
    contract: SourceContract,
    snap: ResponseSnapshot,
    measured_at: str,
) -> FactorObservation:
    """One factor observation from one snapshot: shape first, then parse, then normalize."""
    verdict = read_value(snap, contract)
    raw = verdict.value if verdict.ok else None
    normalized = None
    if verdict.ok:
        try:
            normalized = normalize(contract.normalizer, raw)
        except (KeyError, ValueError, TypeError):
            normalized = None  # the evaluator recomputes and reports the reason
    return FactorObservation(
        factor_id=factor_id,
        type=type_,
        unit=unit,
        source=SourceRef.of(contract),
        raw_value=raw,
        normalized_value=normalized,
        normalizer=contract.normalizer,
        measured_at=measured_at,
        shape=shape_record(verdict),
    )
