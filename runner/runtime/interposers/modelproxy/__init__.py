"""The model proxy (issue 12): the subject's OpenAI / Anthropic endpoint, fault-injectable and
recording. `ModelProxy` in `proxy.py`; wire dialects in `dialects.py`; the answering backend
and its ledger in `backend.py`; live upstreams and their keys in `upstream.py`; the cassette
format in the runtime (`runner.runtime.cassettes.format`)."""

from runner.runtime.interposers.modelproxy.backend import MODES, Mode, ProxyEvent
from runner.runtime.interposers.modelproxy.proxy import DUMMY_KEY, TOOL, ModelProxy
from runner.runtime.interposers.modelproxy.upstream import Upstream, resolve

# `resolve(upstreams)` checks the host keys without starting anything: a run's preflight calls
# it so that a missing key is exit 2 before any cell runs.
__all__ = ["DUMMY_KEY", "MODES", "TOOL", "Mode", "ModelProxy", "ProxyEvent", "Upstream", "resolve"]
