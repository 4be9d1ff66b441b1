from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
from collections.abc import Callable

import pytest

from runner.runtime.host import naming
from runner.runtime.host.netns import (
    BENCH_NET,
    AttemptNetwork,
    NetnsError,
    host_links,
    list_netns,
    subnet_for_index,
)
from tests.runtime.conftest import tcp_probe

pytestmark = pytest.mark.runtime


def _addrs(netns: str | None) -> dict[str, list[str]]:
    cmd = ["ip", "-j", "addr", "show"]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {i["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in i["addr_info"]] for i in out}


def test_subnet_math() -> None:
    assert subnet_for_index(0) == ipaddress.IPv4Network("198.18.0.0/30")
    assert subnet_for_index(1) == ipaddress.IPv4Network("198.18.0.4/30")
    assert subnet_for_index(64) == ipaddress.IPv4Network("198.18.1.0/30")
    last = subnet_for_index(32767)
    assert last.subnet_of(BENCH_NET) and last == ipaddress.IPv4Network("198.19.255.252/30")
    with pytest.raises(NetnsError):
        subnet_for_index(32768)


def test_netns_veth_addresses_and_teardown(run_id: str) -> None:
    before_ns, before_links = set(list_netns()), set(host_links())
    with AttemptNetwork(run_id) as net:
        assert net.netns in list_netns()
        assert naming.parse_as("netns", net.netns).run_id == run_id  # type: ignore[union-attr]
        host = _addrs(None)[net.host_if]
        inside = _addrs(net.netns)
        assert set(inside) == {"lo", net.ns_if}
        assert host == [f"{net.host_addr}/30"]  # no IPv6 link-local either
        assert inside[net.ns_if] == [f"{net.ns_addr}/30"]
        for a in (net.host_addr, net.ns_addr):
            assert a in BENCH_NET and a in net.subnet
        assert "127.0.0.1/8" in inside["lo"]  # lo is up and addressed inside
    assert set(list_netns()) == before_ns
    assert set(host_links()) == before_links


def test_tcp_and_ping_from_ns_to_host_side(
    run_id: str, host_listener: Callable[[str], socket.socket]
) -> None:
    with AttemptNetwork(run_id) as net:
        port = host_listener(str(net.host_addr)).getsockname()[1]
        assert tcp_probe(net.netns, str(net.host_addr), port)
        ping = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                net.netns,
                "busybox",
                "ping",
                "-c",
                "1",
                "-W",
                "3",
                str(net.host_addr),
            ],
            capture_output=True,
            timeout=20,
        )
        assert ping.returncode == 0
        # The namespace reaches nothing else: no default route.
        routes = subprocess.run(
            ["ip", "netns", "exec", net.netns, "ip", "-j", "route"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert all(r["dst"] != "default" for r in json.loads(routes))


def test_two_attempts_get_distinct_subnets(run_id: str) -> None:
    with AttemptNetwork(run_id) as a, AttemptNetwork(run_id) as b:
        assert a.index != b.index and a.netns != b.netns
        assert not a.subnet.overlaps(b.subnet)
        with pytest.raises(NetnsError):
            AttemptNetwork(run_id, index=a.index).create()  # subnet already in use
    assert a.netns not in list_netns() and b.netns not in list_netns()


def test_close_is_idempotent_and_only_deletes_own(run_id: str) -> None:
    net = AttemptNetwork(run_id).create()
    try:
        clash = AttemptNetwork(run_id, index=net.index)
        with pytest.raises(NetnsError):
            clash.create()
        assert net.netns in list_netns()  # the failed create removed nothing of net's
        assert net.host_if in host_links()
    finally:
        net.close()
        net.close()
    assert net.netns not in list_netns()
    assert os.path.exists(f"/var/run/netns/{net.netns}") is False
