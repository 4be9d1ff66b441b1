"""The live side of the model proxy: one configured upstream per provider, its key read from the
host environment, requests forwarded with httpx.

The subject's own credentials (a dummy key) are dropped: only an allow-list of headers is
forwarded, and the host key is added here. The key is held in a field that never appears in a
repr, is never written to a cassette or a record, and is masked out of any response body that
happens to echo it (so neither the subject nor the evidence sees it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import httpx

from runner.evaluator.core.errors import InputError
from runner.runtime.cassettes.format import Dialect
from runner.runtime.interposers.modelproxy.dialects import PROVIDER, UPSTREAM_SUFFIX

Provider = Literal["openai", "anthropic"]
FORWARDED = ("content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta")
REDACTED = b"[redacted]"
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Upstream:
    """Where `provider`'s calls go in live/record mode; the key is `environ[key_env]`."""

    provider: Provider
    base_url: str  # OpenAI: with /v1 (like OPENAI_BASE_URL); Anthropic: without
    key_env: str


@dataclass(frozen=True)
class Resolved:
    upstream: Upstream
    key: str = field(repr=False)


class UpstreamFailure(Exception):
    """No HTTP response came back from the upstream (connect, TLS, timeout, protocol)."""


def resolve(
    upstreams: Mapping[str, Upstream], environ: Mapping[str, str] | None = None
) -> dict[str, Resolved]:
    """Every configured upstream with its key; a missing key is an InputError (exit 2)."""
    env = os.environ if environ is None else environ
    out: dict[str, Resolved] = {}
    if not upstreams:
        raise InputError(
            "live/record mode needs at least one upstream", key="model_proxy.upstreams"
        )
    for name, up in upstreams.items():
        if name != up.provider:
            raise InputError(f"upstream {name!r} is for {up.provider}", key="model_proxy")
        if not up.base_url.startswith(("http://", "https://")):
            raise InputError(
                f"upstream {name!r} base_url must be http(s)", key="model_proxy.base_url"
            )
        key = env.get(up.key_env, "")
        if not key:
            raise InputError(
                f"live mode needs the {up.provider} key in the host environment variable "
                f"{up.key_env}, which is unset or empty",
                key=up.key_env,
            )
        out[name] = Resolved(up, key)
    return out


class Forwarder:
    """Thread-safe: one httpx client shared by the backend's handler threads."""

    def __init__(self, upstreams: Mapping[str, Resolved], timeout: float = 600.0) -> None:
        self.upstreams = dict(upstreams)
        self.client = httpx.Client(timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self.client.close()

    def secrets(self) -> list[bytes]:
        return [r.key.encode() for r in self.upstreams.values()]

    def forward(
        self, dialect: Dialect, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) from the provider's upstream."""
        provider = PROVIDER[dialect]
        res = self.upstreams.get(provider)
        if res is None:
            raise UpstreamFailure(f"no {provider} upstream configured")
        out = {k: v for k, v in headers.items() if k.lower() in FORWARDED}
        out["accept-encoding"] = "identity"
        if provider == "openai":
            out["authorization"] = f"Bearer {res.key}"
        else:
            out["x-api-key"] = res.key
            out.setdefault("anthropic-version", ANTHROPIC_VERSION)
        url = res.upstream.base_url.rstrip("/") + UPSTREAM_SUFFIX[dialect]
        try:
            resp = self.client.post(url, content=body, headers=out)
        except httpx.HTTPError as exc:
            raise UpstreamFailure(f"{type(exc).__name__}: {exc}") from exc
        data = self.redact(resp.content)
        return resp.status_code, resp.headers.get("content-type", "application/json"), data

    def redact(self, data: bytes) -> bytes:
        for s in self.secrets():
            data = data.replace(s, REDACTED)
        return data
