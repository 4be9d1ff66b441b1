"""The ProcessRegistry a SigkillFault reads, over real processes, for tests of the fault path.

The attempt's own SubjectRegistry also drops privileges and enters the attempt's netns; the tests
that use this one are about the kill, its witness and the relaunch request, not about those.
"""

from __future__ import annotations

import threading

from runner.runtime.host.procs import Subject


class ProcessRegistry:
    def __init__(self) -> None:
        self.subjects: list[Subject] = []
        self.relaunch: list[str] = []  # the reasons recovery gave
        self.asked = threading.Event()  # set once recovery asked for a relaunch
        self.expected = False  # the actuator announced its kill

    def add(self, subject: Subject) -> Subject:
        self.subjects.append(subject)
        return subject

    def current(self) -> Subject | None:
        return self.subjects[-1] if self.subjects else None

    def expect_relaunch(self) -> None:
        self.expected = True

    def request_relaunch(self, reason: str) -> None:
        self.relaunch.append(reason)
        self.asked.set()
