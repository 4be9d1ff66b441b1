"""What the evidence hashes to: the evidence root and its leaves. (The terminal-records hash a
proof commits to is the verdict's: verdict/outcomes.py, beside the record it hashes.)

Every function here is on the hot path of a million-cell evaluation, so each computes the same
digest as the canonical (RFC 8785) encoder through a faster route; the docstrings say why the
bytes are the same.

The evidence root is defined over the sorted leaves (one line `sha256:<hex>` each), which makes
it independent of record and journal order; a changed, added or dropped record changes a leaf and
so the root. At a million cells there are about 12 M leaves: as a sorted list of str they would
take about 1.3 GiB. `EvidenceRoot` computes the same root with an external radix sort instead:
each leaf is kept as its 32 raw digest bytes in one of 256 packed buffers by its first byte
(hex order is byte order), the buffers spill to one temporary file past `SPILL_BYTES`, and the
root hashes the buckets in byte order, each sorted on its own (about 47,000 leaves each at 12 M;
a bucket past `BUCKET_LEAVES`, e.g. from repeated records, is split again by its next byte).
Memory is bounded by `SPILL_BYTES` plus one bucket, not by the number of leaves.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from runner.evaluator.core.canonical import fast_digest

EVIDENCE_ROOT_DOMAIN = b"afb.evidence-root/1\n"
SPILL_BYTES = 32 << 20  # packed leaves held in memory before a spill (about 1 M leaves)
BUCKET_LEAVES = 1 << 20  # a bucket larger than this is split again by its next byte
Export = tuple[str, list[list[tuple[int, int]]]]  # (spill file, per bucket its segments)


def evidence_root(leaves: Iterable[str]) -> str:
    """Order-independent root: SHA-256 over the domain tag and the sorted leaf digests
    (`sha256:<hex>`), one per line. Computed by `EvidenceRoot` (see the module docstring)."""
    root = EvidenceRoot()
    for leaf in leaves:
        root.add(leaf)
    return root.value()


class EvidenceRoot:
    """`evidence_root` fed one leaf at a time, in bounded memory (an external radix sort)."""

    def __init__(
        self,
        spill_bytes: int = SPILL_BYTES,
        bucket_leaves: int = BUCKET_LEAVES,
        spill_path: str | None = None,
    ) -> None:
        """`spill_path`: spill to this file (created), not to an anonymous one, so that
        another process can read the leaves (`export`)."""
        self._buckets = [bytearray() for _ in range(256)]
        self._held = 0
        self._spill_bytes = spill_bytes
        self._bucket_leaves = bucket_leaves
        self._spill_path = spill_path
        self._file: Any = None  # the spill file, created on the first spill
        self._segments: list[list[tuple[int, int]]] = [[] for _ in range(256)]  # (offset, size)
        self.count = 0

    def add(self, leaf: str) -> None:
        """Add a leaf in its `sha256:<hex>` form."""
        if len(leaf) != 71 or not leaf.startswith("sha256:"):
            raise ValueError(f"not a leaf digest: {leaf!r}")
        self.add_digest(bytes.fromhex(leaf[7:]))

    def add_digest(self, raw: bytes) -> None:
        """Add a leaf as its 32 raw digest bytes."""
        if len(raw) != 32:
            raise ValueError("a leaf digest is 32 bytes")
        self._buckets[raw[0]] += raw
        self.count += 1
        self._held += 32
        if self._held >= self._spill_bytes:
            self._spill()

    def add_digests(self, digests: Iterable[bytes]) -> None:
        """`add_digest` of each (one call for a journal's leaves)."""
        buckets = self._buckets
        n = 0
        for raw in digests:
            if len(raw) != 32:
                raise ValueError("a leaf digest is 32 bytes")
            buckets[raw[0]] += raw
            n += 1
        self.count += n
        self._held += 32 * n
        if self._held >= self._spill_bytes:
            self._spill()

    def _spill(self) -> None:
        if self._file is None and self._spill_path is not None:
            self._file = open(self._spill_path, "w+b")  # noqa: SIM115 (closed by value or export)
        elif self._file is None:
            self._file = tempfile.TemporaryFile(prefix="afb-evidence-root-")  # noqa: SIM115 (closed by value)
        for b, buf in enumerate(self._buckets):
            if buf:
                self._segments[b].append((self._file.tell(), len(buf)))
                self._file.write(buf)
                self._buckets[b] = bytearray()
        self._held = 0

    def _bucket(self, b: int, parts: Sequence[Export] = ()) -> bytes:
        chunks = []
        for offset, size in self._segments[b]:
            self._file.seek(offset)
            chunks.append(self._file.read(size))
        for path, segments in parts:
            with open(path, "rb") as fh:
                for offset, size in segments[b]:
                    fh.seek(offset)
                    chunks.append(fh.read(size))
        chunks.append(bytes(self._buckets[b]))
        self._buckets[b] = bytearray()
        return b"".join(chunks)

    def export(self) -> Export:
        """Spill every leaf to the `spill_path` file and say where each bucket's are, for
        another process's `value(parts=...)`. Consumes the leaves."""
        if self._spill_path is None:
            raise RuntimeError("export() is for a root made with a spill_path")
        self._spill()
        if self._file is not None:
            self._file.close()
            self._file = None
        segments, self._segments = self._segments, [[] for _ in range(256)]
        return self._spill_path, segments

    def value(self, parts: Sequence[Export] = ()) -> str:
        """The root over these leaves and those of `parts` (`export`s of other roots).
        Consumes the leaves: call once."""
        h = hashlib.sha256(EVIDENCE_ROOT_DOMAIN)
        try:
            for b in range(256):
                self._emit(h, self._bucket(b, parts), 1)
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None
        return "sha256:" + h.hexdigest()

    def _emit(self, h: Any, data: bytes, depth: int) -> None:
        """Hash the leaves packed in `data` (all sharing their first `depth` bytes) in order."""
        n = len(data) // 32
        if n == 0:
            return
        if n > self._bucket_leaves and depth < 32:
            if data.count(data[:32]) == n:  # n non-overlapping matches in 32n bytes: all equal
                line = b"sha256:" + data[:32].hex().encode() + b"\n"
                for _ in range(n):
                    h.update(line)
                return
            parts = [bytearray() for _ in range(256)]
            for i in range(0, len(data), 32):
                parts[data[i + depth]] += data[i : i + 32]
            del data
            for part in parts:
                self._emit(h, bytes(part), depth + 1)
            return
        packed = b"".join(sorted([data[i : i + 32] for i in range(0, len(data), 32)]))
        # one line `sha256:<hex>\n` per leaf: the hex of each 32 bytes, newline-separated, with
        # the prefix put after every newline (no other newline in hex) and before the first
        lines = packed.hex("\n", 32).replace("\n", "\nsha256:")
        h.update(b"sha256:" + lines.encode() + b"\n")


def leaf(at_ns: str, record: dict[str, Any]) -> str:
    """Each record with its own timestamp; seq and prev are positions, left out on purpose.

    Reading a journal computes the same digest from the line's bytes (`journal.line_leaf`).
    """
    return fast_digest({"at_ns": at_ns, "record": record})
