from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from runner.runtime.host import naming
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.nft import NftError, PartitionTable, list_tables, run_nft
from tests.runtime.conftest import tcp_probe

pytestmark = pytest.mark.runtime


def test_partition_drops_selected_endpoint_only(
    run_id: str, host_listener: Callable[[str], socket.socket]
) -> None:
    with AttemptNetwork(run_id) as net:
        host = str(net.host_addr)
        target = host_listener(host).getsockname()[1]
        control = host_listener(host).getsockname()[1]
        assert tcp_probe(net.netns, host, target) and tcp_probe(net.netns, host, control)
        with PartitionTable(run_id, net.index, netns=net.netns) as table:  # type: ignore[arg-type]
            assert naming.parse_as("nft", table.name) is not None
            assert ("inet", table.name) in list_tables(netns=net.netns)
            assert ("inet", table.name) not in list_tables()  # not in the host namespace
            rule = table.add_drop(host, target)
            assert (rule.daddr, rule.dport, rule.protocol, rule.packets) == (host, target, "tcp", 0)
            text = run_nft(["list", "table", "inet", table.name], netns=net.netns)
            assert f"ip daddr {host} tcp dport {target} counter" in text

            assert not tcp_probe(net.netns, host, target, timeout=1.0)
            assert tcp_probe(net.netns, host, control)
            moved = table.get_rule(rule.rule_id)
            assert moved is not None and moved.packets >= 1 and moved.bytes > 0

            table.remove_rule(rule.rule_id)
            assert table.get_rule(rule.rule_id) is None
            assert tcp_probe(net.netns, host, target)
            with pytest.raises(NftError):
                table.remove_rule(rule.rule_id)
        assert ("inet", table.name) not in list_tables(netns=net.netns)


def test_readback_exact_for_edge_values(run_id: str) -> None:
    # Highest address of the bench range and the highest port: read back must be exact.
    with (
        AttemptNetwork(run_id) as net,
        PartitionTable(run_id, net.index, netns=net.netns) as table,  # type: ignore[arg-type]
    ):
        rule = table.add_drop("198.19.255.254", 65535, "udp")
        assert (rule.daddr, rule.dport, rule.protocol) == ("198.19.255.254", 65535, "udp")
        assert [r.rule_id for r in table.rules()] == [rule.rule_id]


def test_duplicate_table_refused(run_id: str) -> None:
    with (
        AttemptNetwork(run_id) as net,
        PartitionTable(run_id, net.index, netns=net.netns),  # type: ignore[arg-type]
    ):
        with pytest.raises(NftError):
            PartitionTable(run_id, net.index, netns=net.netns).create()  # type: ignore[arg-type]
        assert len([t for t in list_tables(netns=net.netns) if t[1].startswith("afb_")]) == 1


def test_bad_endpoint_rejected(run_id: str) -> None:
    with (
        AttemptNetwork(run_id) as net,
        PartitionTable(run_id, net.index, netns=net.netns) as table,  # type: ignore[arg-type]
    ):
        with pytest.raises(NftError):
            table.add_drop(str(net.host_addr), 0)
        with pytest.raises(ValueError):
            table.add_drop("not-an-ip", 80)
        assert table.rules() == []
