"""Errors that reach a user as a clear message with exit code 2 (input) rather than a traceback."""

from __future__ import annotations


class InputError(Exception):
    """A mistake in something the user gave us: names where, and what was expected."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.key = key
        self.line = line
        super().__init__(self.render())

    def render(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.key:
            where.append(f"key `{self.key}`")
        prefix = ": ".join([", ".join(where)]) if where else ""
        return f"{prefix}: {self.message}" if prefix else self.message


class EvidenceError(Exception):
    """Evidence on disk is damaged or inconsistent (a hash, chain or address mismatch)."""
