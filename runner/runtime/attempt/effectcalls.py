"""The egress proxy's calls (the spec's effect tools, e.g. `submit_patch`), journaled in order.

A sink in front of the trigger engine: each call the egress proxy receives is journaled as an
`EffectCall` before the engine sees it (and before it is forwarded), so the attempt's journal
orders every effect call against the model answers served (`ModelExchange`) and the subject's
relaunches (`SubjectExit`): who asked for a duplicate is decidable from the journal alone
(runner/evaluator/publish/truthfulness.py). Observation only: the engine's decision is returned
unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from runner.evaluator.core.types import Phase
from runner.evaluator.evidence.records import EffectCall
from runner.runtime.events import Decision, EventSink


class EffectCallSink:
    """An `EventSink` that journals each received call, then asks `inner`."""

    def __init__(
        self, inner: EventSink, append: Callable[[Any], object], ref: Mapping[str, Any]
    ) -> None:
        self.inner = inner
        self._append = append
        self._ref = dict(ref)
        self._lock = threading.Lock()
        self._seq = 0

    def event(
        self,
        source: str,
        tool: str,
        phase: Phase,
        call_id: str,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        if Phase(phase) is Phase.RECEIVED:
            with self._lock:  # seq and journal order agree
                self._seq += 1
                self._append(EffectCall(**self._ref, call_id=call_id, tool=tool, seq=self._seq))
        return self.inner.event(source, tool, phase, call_id, context)
