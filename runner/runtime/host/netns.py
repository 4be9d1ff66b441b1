"""Per-attempt network namespace + veth pair (pyroute2), addressed from 198.18.0.0/15 only.

Attempt index n owns the /30 at 198.18.0.0 + 4n: host side .1, namespace side .2. The index
is picked under a host-wide lock as the lowest one whose netns name and subnet are both free,
so concurrent runs on one machine never share a subnet. Teardown deletes exactly what
`create` made (host veth, which takes its peer with it, then the netns). A prober process
(`prober()`, started on demand) is stopped first: a process inside keeps a namespace alive.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
from collections.abc import Iterator
from types import TracebackType

from pyroute2 import IPRoute, NetNS
from pyroute2 import netns as pr_netns

from runner.runtime.host import naming, paths
from runner.runtime.host.prober import NetnsProber

BENCH_NET = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544 benchmarking range
SUBNET_PREFIX = 30
MAX_SUBNETS = BENCH_NET.num_addresses >> (32 - SUBNET_PREFIX)
# addr_gen_mode=none: no IPv6 link-local on our veths, so their only addresses are from BENCH_NET.
_NO_IPV6_LL = {
    "IFLA_AF_SPEC": {"attrs": [("AF_INET6", {"attrs": [("IFLA_INET6_ADDR_GEN_MODE", 1)]})]}
}


class NetnsError(RuntimeError):
    pass


def subnet_for_index(n: int) -> ipaddress.IPv4Network:
    if not 0 <= n < min(MAX_SUBNETS, naming.MAX_INDEX + 1):
        raise NetnsError(f"attempt index {n} out of range")
    base = int(BENCH_NET.network_address) + (n << (32 - SUBNET_PREFIX))
    return ipaddress.IPv4Network((base, SUBNET_PREFIX))


def list_netns() -> list[str]:
    return sorted(pr_netns.listnetns())


def _bench_addrs_in_use() -> set[ipaddress.IPv4Address]:
    with IPRoute() as ipr:
        addrs = {ipaddress.IPv4Address(a.get("IFA_ADDRESS")) for a in ipr.get_addr(family=2)}
    return {a for a in addrs if a in BENCH_NET}


@contextlib.contextmanager
def _alloc_lock() -> Iterator[None]:
    paths.NETNS_ALLOC_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.NETNS_ALLOC_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class AttemptNetwork:
    """Context manager owning one netns + veth pair for one attempt."""

    def __init__(self, run_id: str, index: int | None = None) -> None:
        self.run_id = naming.check_run_id(run_id)
        self.index = index
        self._created_ns = False
        self._created_veth = False
        self._prober: NetnsProber | None = None

    # names/addresses are valid once the index is known (after create() when auto-allocated)
    @property
    def netns(self) -> str:
        return naming.netns_name(self.run_id, self._idx())

    @property
    def host_if(self) -> str:
        return naming.veth_names(self.run_id, self._idx())[0]

    @property
    def ns_if(self) -> str:
        return naming.veth_names(self.run_id, self._idx())[1]

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return subnet_for_index(self._idx())

    @property
    def host_addr(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1

    @property
    def ns_addr(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 2

    def _idx(self) -> int:
        if self.index is None:
            raise NetnsError("index not allocated yet; call create()")
        return self.index

    def _pick_index(self) -> int:
        used = _bench_addrs_in_use()
        existing = set(list_netns())
        for n in range(min(MAX_SUBNETS, naming.MAX_INDEX + 1)):
            net = subnet_for_index(n)
            if naming.netns_name(self.run_id, n) in existing:
                continue
            if any(a in net for a in used):
                continue
            return n
        raise NetnsError("no free subnet in 198.18.0.0/15")

    def create(self) -> AttemptNetwork:
        with _alloc_lock():
            if self.index is None:
                self.index = self._pick_index()
            elif any(a in self.subnet for a in _bench_addrs_in_use()):
                raise NetnsError(f"subnet {self.subnet} already in use on this host")
            try:
                self._create_locked()
            except BaseException:
                self.close()
                raise
        return self

    def _create_locked(self) -> None:
        if self.netns in list_netns():
            raise NetnsError(f"netns {self.netns} already exists")
        pr_netns.create(self.netns)
        self._created_ns = True
        plen = SUBNET_PREFIX
        with IPRoute() as ipr:
            ipr.link(
                "add",
                ifname=self.host_if,
                kind="veth",
                peer={"ifname": self.ns_if, "net_ns_fd": self.netns},
            )
            self._created_veth = True
            (idx,) = ipr.link_lookup(ifname=self.host_if)
            ipr.link("set", index=idx, **_NO_IPV6_LL)
            ipr.addr("add", index=idx, address=str(self.host_addr), prefixlen=plen)
            ipr.link("set", index=idx, state="up")
        with NetNS(self.netns, flags=0) as ns:
            (lo,) = ns.link_lookup(ifname="lo")
            ns.link("set", index=lo, state="up")
            (idx,) = ns.link_lookup(ifname=self.ns_if)
            ns.link("set", index=idx, **_NO_IPV6_LL)
            ns.addr("add", index=idx, address=str(self.ns_addr), prefixlen=plen)
            ns.link("set", index=idx, state="up")

    def prober(self) -> NetnsProber:
        """The namespace's prober process, started on first use; stopped by `close`."""
        if not self._created_ns:
            raise NetnsError("netns not created")
        if self._prober is None or not self._prober.alive:
            if self._prober is not None:
                self._prober.close()
            self._prober = NetnsProber(self.run_id, self.netns).start()
        return self._prober

    def close(self) -> None:
        """Delete only what this object created; safe to call twice."""
        if self._prober is not None:
            self._prober.close()
            self._prober = None
        if self._created_veth:
            with IPRoute() as ipr:
                found = ipr.link_lookup(ifname=self.host_if)
                if found:
                    ipr.link("del", index=found[0])
            self._created_veth = False
        if self._created_ns:
            remove_netns(self.netns)
            self._created_ns = False

    def __enter__(self) -> AttemptNetwork:
        return self.create()

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def remove_netns(name: str) -> None:
    if name in list_netns():
        pr_netns.remove(name)


def delete_link(ifname: str) -> bool:
    """Delete a host-netns link by name; False when it does not exist."""
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            return False
        ipr.link("del", index=found[0])
        return True


def host_links() -> list[str]:
    with IPRoute() as ipr:
        return sorted(str(link.get("IFLA_IFNAME")) for link in ipr.get_links())
