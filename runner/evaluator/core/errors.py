"""Errors that reach a user as a clear message with exit code 2 (input) or 3 (evidence) rather
than a traceback; messages are kept short (`shorten`), so a 10 MB value is never echoed whole."""

from __future__ import annotations

SHOWN = 200  # characters of one value shown in a message
MESSAGE_MAX = 2000  # characters of a whole message


def shorten(text: str, limit: int = SHOWN) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


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
        self.message = shorten(message, MESSAGE_MAX)
        self.file = None if file is None else shorten(file)
        self.key = None if key is None else shorten(key)
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
