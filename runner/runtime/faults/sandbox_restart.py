"""sandbox_restart: restart (or recreate) the sandbox container under a live session.

Actuator: `Sandbox.restart()` (`recreate()` when `parameters.mode == "recreate"`), then
`ToolInterposer.bump_epoch()` so every session of the old sandbox is stale from then on.

Collectors, each reading its own source:

- `sandbox_inspector` (before and after): container id, init pid and start time from the
  container runtime's inspect, and the boot token from inside the sandbox (written by the
  sandbox's own entrypoint at every start, checked against PID 1's start time);
- `tool_interposer` (after release, at the end of the attempt): the interposer's session log --
  a call on a session of the old epoch failed with 409, and the subject then reattached on a
  newer epoch. The old epoch is read from the interposer before the actuator runs.
"""

from __future__ import annotations

from typing import Any, Self

from runner.evaluator.protocol.faultkinds import SANDBOX_RESTART, RestartParams
from runner.runtime.events import Directive
from runner.runtime.faults.base import (
    FaultContext,
    FaultPlugin,
    Injection,
    Observations,
    Observed,
    WitnessStage,
)
from runner.runtime.faults.registry import FaultKindPlugin, SelftestCase, register
from runner.runtime.faults.resources import AttemptResources, ToolEndpoint
from runner.runtime.sandbox.base import Sandbox

BEFORE = WitnessStage.BEFORE_INJECTION
AFTER = WitnessStage.AFTER_INJECTION
AFTER_RELEASE = WitnessStage.AFTER_RELEASE


class SandboxRestartFault(FaultPlugin[RestartParams]):
    kind = SANDBOX_RESTART
    actuator = "podman.restart_or_recreate+interposer.bump_epoch"
    actuator_component = "container_runtime"
    observations = {
        "sandbox_before": Observed("sandbox_inspector", BEFORE),
        "sandbox_after": Observed("sandbox_inspector", AFTER),
        "interposer_session": Observed("tool_interposer", AFTER_RELEASE),
    }

    def __init__(
        self, sandbox: Sandbox, interposer: ToolEndpoint, params: RestartParams | None = None
    ) -> None:
        self.sandbox = sandbox
        self.interposer = interposer
        self.params = params or RestartParams()
        self._old_epoch: int | None = None

    @classmethod
    def build(cls, resources: AttemptResources, params: RestartParams) -> Self:
        return cls(resources.sandbox, resources.interposer, params)

    def inject(self, ctx: FaultContext) -> Injection:
        mode = self.params.mode  # "restart" | "recreate": checked by the parameter model
        old = self.interposer.epoch
        if mode == "recreate":
            self.sandbox.recreate()
        else:
            self.sandbox.restart()
        new = self.interposer.bump_epoch()
        return Injection(
            applied=True,
            directive=Directive.CONTINUE,
            detail={"mode": mode, "epoch_before": old, "epoch_after": new},
        )

    def collect_witness(self, ctx: FaultContext, stage: WitnessStage) -> Observations:
        if stage is BEFORE:
            self._old_epoch = self.interposer.epoch  # sessions of this epoch must go stale
            return {"sandbox_before": self._inspect()}
        if stage is AFTER:
            return {"sandbox_after": self._inspect()}
        old = self._old_epoch if self._old_epoch is not None else self.interposer.epoch
        return {"interposer_session": self.interposer.session_observation(old)}

    def _inspect(self) -> dict[str, Any]:
        """Identity from the runtime + inside the sandbox; empty fields when it cannot be read."""
        out: dict[str, Any] = {"collector": "sandbox_inspector", "name": self.sandbox.name}
        try:
            ident = self.sandbox.identity()
        except Exception as exc:  # an unreadable sandbox is evidence too, never an exception
            return {
                **out,
                "container_id": "",
                "init_pid": None,
                "started_at": "",
                "boot_token": "",
                "error": f"{type(exc).__name__}: {exc}",
            }
        return {**out, **ident.model_dump()}


register(
    FaultKindPlugin(
        SandboxRestartFault,
        selftest=SelftestCase(
            trigger={"tool": "exec", "ordinal": 2, "phase": "dispatched"},
            parameters={"mode": "restart"},
        ),
    )
)
