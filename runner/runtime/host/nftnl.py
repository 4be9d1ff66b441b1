"""nftables writes over netlink (pyroute2), inside one network namespace.

The partition actuator's path to the kernel: table, chain, drop rule and their deletion are
nfnetlink messages built here. Reading back stays on the `nft -j` CLI (`host.nft`), a second,
independent path to the same ruleset, which the witness uses.

Exactness: every match is a full-width compare (4-byte IPv4 address, 1-byte protocol, 2-byte
port), so no bitwise mask is ever emitted. pyroute2's `expressions.ipv4addr` helper is not used:
for a prefix it packs the mask as a host-order integer of N one-bits (`/15` -> 255.127.0.0
instead of 255.254.0.0 on little-endian hosts), and it emits no `meta nfproto ipv4` guard, so
in an `inet` table it would compare bytes 16..19 of IPv6 headers too. The expressions below are
the ones `nft` itself emits for `ip daddr A tcp dport P counter drop` (a runtime test compares
the two rules' bytecode).

Threads: pyroute2 keeps one socket per thread, created in the calling thread's namespace. All
calls therefore run on one worker thread that has setns()'d into the attempt's namespace
(setns(CLONE_NEWNET) is per-thread) and never leaves it; the thread ends with `close()`.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nfnetlink.nftsocket import NFPROTO_INET, NFPROTO_IPV4, Cmp, Meta, Regs
from pyroute2.nftables.expressions import genex
from pyroute2.nftables.main import NFTables

from runner.runtime.host import paths

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
NF_DROP, NF_ACCEPT = 0, 1
HOOK_OUTPUT = "output"
PROTOCOLS = {"tcp": 6, "udp": 17}
_PAYLOAD_NETWORK, _PAYLOAD_TRANSPORT = 1, 2
_CALL_TIMEOUT = 10.0


class NftNetlinkError(RuntimeError):
    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


def _cmp_eq(data: bytes) -> dict[str, Any]:
    value = {"attrs": [("NFTA_DATA_VALUE", data)]}
    out: dict[str, Any] = genex(
        "cmp", {"sreg": Regs.NFT_REG_1, "op": Cmp.NFT_CMP_EQ, "data": value}
    )
    return out


def _meta(key: Meta) -> dict[str, Any]:
    out: dict[str, Any] = genex("meta", {"dreg": Regs.NFT_REG_1, "key": key})
    return out


def _payload(base: int, offset: int, length: int) -> dict[str, Any]:
    return genex("payload", {"dreg": Regs.NFT_REG_1, "base": base, "offset": offset, "len": length})


def drop_rule_expressions(daddr: str, dport: int, protocol: str) -> list[dict[str, Any]]:
    """`meta nfproto ipv4; ip daddr A; meta l4proto P; th dport N; counter; drop`."""
    addr = ipaddress.IPv4Address(daddr)
    if protocol not in PROTOCOLS or not 0 < dport < 65536:
        raise NftNetlinkError(f"unsupported endpoint {protocol}/{dport}")
    verdict = {"attrs": [("NFTA_DATA_VERDICT", {"attrs": [("NFTA_VERDICT_CODE", NF_DROP)]})]}
    return [
        _meta(Meta.NFT_META_NFPROTO),
        _cmp_eq(bytes([NFPROTO_IPV4])),
        _payload(_PAYLOAD_NETWORK, 16, 4),  # IPv4 destination address
        _cmp_eq(addr.packed),
        _meta(Meta.NFT_META_L4PROTO),
        _cmp_eq(bytes([PROTOCOLS[protocol]])),
        _payload(_PAYLOAD_TRANSPORT, 2, 2),  # TCP/UDP destination port
        _cmp_eq(struct.pack(">H", dport)),
        genex("counter", {"bytes": 0, "packets": 0}),
        genex("immediate", {"dreg": Regs.NFT_REG_VERDICT, "data": verdict}),
    ]


def _enter_netns(netns: str) -> None:
    """Move the calling thread (only) into the named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(paths.NETNS_DIR / netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({netns}): {os.strerror(err)}")
    finally:
        os.close(fd)


class NftNetlink:
    """pyroute2 NFTables (family inet) on a worker thread inside `netns` (None: the host's)."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self._nft: NFTables | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="afb-nftnl")
        try:
            self._call(self._open)
        except BaseException:
            self._pool.shutdown(wait=True)  # never reuse a thread whose setns failed
            raise

    def _open(self) -> None:
        if self.netns is not None:
            _enter_netns(self.netns)
        self._nft = NFTables(nfgen_family=NFPROTO_INET)

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return self._pool.submit(fn).result(timeout=_CALL_TIMEOUT)
        except NetlinkError as exc:
            raise NftNetlinkError(f"netlink ({self.netns}): {exc}", exc.code) from exc
        except (OSError, TimeoutError) as exc:
            raise NftNetlinkError(f"nftables over netlink ({self.netns}): {exc!r}") from exc

    def _sock(self) -> NFTables:
        if self._nft is None:
            raise NftNetlinkError("closed")
        return self._nft

    def create_table(self, table: str, chain: str, *, priority: int = 0) -> None:
        """Create table + base chain (filter, hook output, policy accept); fails if it exists."""

        def do() -> None:
            nft = self._sock()
            nft.table("create", name=table)  # NLM_F_EXCL: an existing table is an error
            try:
                nft.chain(
                    "create",
                    table=table,
                    name=chain,
                    hook=HOOK_OUTPUT,
                    type="filter",
                    priority=priority,
                    policy=NF_ACCEPT,
                )
            except BaseException:
                nft.table("del", name=table)
                raise

        self._call(do)

    def add_drop(self, table: str, chain: str, daddr: str, dport: int, protocol: str, *,
                 comment: str) -> None:  # fmt: skip
        exprs = drop_rule_expressions(daddr, dport, protocol)
        if len(comment.encode()) > 127:
            raise NftNetlinkError("comment too long")
        # pyroute2 encodes NFTA_RULE_USERDATA as one NFTNL_UDATA_RULE_COMMENT TLV (type 0).
        self._call(
            lambda: self._sock().rule(
                "add", table=table, chain=chain, expressions=[exprs], userdata=comment
            )
        )

    def delete_rule(self, table: str, chain: str, handle: int) -> None:
        self._call(lambda: self._sock().rule("del", table=table, chain=chain, handle=handle))

    def delete_table(self, table: str) -> None:
        self._call(lambda: self._sock().table("del", name=table))

    def close(self) -> None:
        """Close the socket and end the worker thread; safe to call twice."""

        def do() -> None:
            if self._nft is not None:
                self._nft.close()
                self._nft = None

        hung = False
        try:
            self._pool.submit(do).result(timeout=_CALL_TIMEOUT)
        except RuntimeError:  # pool already shut down
            pass
        except TimeoutError:  # the worker is stuck in an earlier call: do not wait for it
            hung = True
        finally:
            self._pool.shutdown(wait=not hung, cancel_futures=hung)
