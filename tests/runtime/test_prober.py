"""The in-namespace prober: where it runs, what it reports, and that it fails closed."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.runtime.host import naming, paths
from runner.runtime.host.netns import AttemptNetwork, NetnsError
from runner.runtime.host.nft import PartitionTable
from runner.runtime.host.prober import PROBER_ROLE, Target

pytestmark = pytest.mark.runtime


def _env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.decode().split("=", 1) for e in raw.split(b"\0") if b"=" in e)


def test_prober_runs_in_the_namespace_and_stops_with_it(run_id: str) -> None:
    net = AttemptNetwork(run_id)
    with pytest.raises(NetnsError):
        net.prober()  # no namespace yet
    with net:
        prober = net.prober()
        assert net.prober() is prober  # started once
        assert prober.pid is not None
        ns_inode = os.stat(paths.NETNS_DIR / net.netns).st_ino
        assert os.stat(f"/proc/{prober.pid}/ns/net").st_ino == ns_inode
        env = _env(prober.pid)  # sweep finds a leftover by this marker
        assert env[naming.ENV_RUN] == run_id and env[naming.ENV_ROLE] == PROBER_ROLE
        pid = prober.pid
    assert not Path(f"/proc/{pid}").exists()


def test_reachable_refused_and_blocked(
    run_id: str, host_listener: Callable[[str], socket.socket]
) -> None:
    with (
        AttemptNetwork(run_id) as net,
        PartitionTable(run_id, net.index, netns=net.netns) as table,  # type: ignore[arg-type]
    ):
        host = str(net.host_addr)
        target = host_listener(host).getsockname()[1]
        control = host_listener(host).getsockname()[1]
        closed = host_listener(host)
        refused = closed.getsockname()[1]
        closed.close()
        prober = net.prober()
        res, mid = prober.probe(
            [Target(host, target, 1.0), Target(host, refused, 1.0)], between=lambda: "mid"
        )
        assert [r["reachable"] for r in res] == [True, False] and mid == "mid"
        assert res[1]["error"] == os.strerror(111)  # ECONNREFUSED, not a timeout

        rule = table.add_drop(host, target)
        for _ in range(3):  # the counter moves by exactly the probe's own SYN, every time
            before = table.get_rule(rule.rule_id).packets  # type: ignore[union-attr]
            t0 = time.monotonic()
            res, after = prober.probe(
                [Target(host, target, 0.025), Target(host, control, 1.0)],
                between=lambda: table.get_rule(rule.rule_id).packets,  # type: ignore[union-attr]
            )
            took = time.monotonic() - t0
            assert after == before + 1
            assert (res[0]["reachable"], res[0]["error"]) == (False, "timeout")
            assert res[1]["reachable"] is True
            assert 0.025 <= took < 0.5
        # Sockets were closed before the first SYN retransmission (1 s): no stray drops.
        time.sleep(1.2)
        assert table.get_rule(rule.rule_id).packets == after  # type: ignore[union-attr]
        table.remove_rule(rule.rule_id)
        res, _ = prober.probe([Target(host, target, 1.0)])
        assert res[0]["reachable"] is True


def test_dead_prober_fails_closed(
    run_id: str, host_listener: Callable[[str], socket.socket]
) -> None:
    with AttemptNetwork(run_id) as net:
        host = str(net.host_addr)
        port = host_listener(host).getsockname()[1]
        prober = net.prober()
        assert prober.pid is not None
        os.kill(prober.pid, 9)
        res, mid = prober.probe([Target(host, port, 1.0)], between=lambda: "never")
        assert res[0]["reachable"] is False and res[0]["error"].startswith("probe_failed")
        assert mid is None
        fresh = net.prober()  # a dead prober is replaced on the next request for one
        assert fresh is not prober and fresh.probe([Target(host, port, 1.0)])[0][0]["reachable"]
