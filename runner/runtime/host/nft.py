"""Per-attempt nftables table holding network-partition drop rules with counters.

Two independent paths to the kernel's ruleset:

- writes (table, chain, drop rules, their deletion) go over netlink through pyroute2
  (`host.nftnl`), from a thread inside the attempt's namespace;
- reads go through the `nft` CLI's JSON interface (`ip netns exec <ns> nft -j list table ...`):
  every rule the actuator writes is read back this way before it counts as applied, and the
  witness (`nft_reader`) reads rules and counters the same way. `ip` setns()es and then execs
  nft, which is simpler and safer than a preexec setns in a threaded Python process.

The table (`inet afb_<run>_<n>`) lives in the agent's namespace and hooks `output`, so it
catches exactly the subject's outbound traffic. Each drop rule carries a unique comment
(`afb:<rule id>`) so it can be found, verified and counted after the fact.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import secrets
import subprocess
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict

from runner.runtime.host import naming
from runner.runtime.host.nftnl import NftNetlink, NftNetlinkError

FAMILY = "inet"
CHAIN = "partition"
_COMMENT_PREFIX = "afb:"


class NftError(RuntimeError):
    pass


def run_nft(args: list[str], *, netns: str | None = None, stdin: str | None = None) -> str:
    """Run nft (optionally inside a named netns) and return stdout; raise NftError on failure."""
    argv = (["ip", "netns", "exec", netns] if netns else []) + ["nft", *args]
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise NftError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


def apply_json(commands: list[dict[str, Any]], *, netns: str | None = None) -> None:
    run_nft(["-j", "-f", "-"], netns=netns, stdin=json.dumps({"nftables": commands}))


def list_tables(*, netns: str | None = None) -> list[tuple[str, str]]:
    """(family, name) of every table in the given namespace (host when None)."""
    out = json.loads(run_nft(["-j", "list", "tables"], netns=netns) or '{"nftables": []}')
    return [(t["table"]["family"], t["table"]["name"]) for t in out["nftables"] if "table" in t]


def delete_table(family: str, name: str, *, netns: str | None = None) -> None:
    apply_json([{"delete": {"table": {"family": family, "name": name}}}], netns=netns)


class DropRule(BaseModel):
    """A drop rule as read back from the kernel (not as we asked for it)."""

    model_config = ConfigDict(frozen=True)
    rule_id: str
    handle: int
    daddr: str
    dport: int
    protocol: str
    packets: int
    bytes: int


def _parse_rule(rule: dict[str, Any]) -> DropRule | None:
    comment = str(rule.get("comment", ""))
    if not comment.startswith(_COMMENT_PREFIX):
        return None
    daddr: str | None = None
    dport: int | None = None
    proto: str | None = None
    counter: dict[str, int] | None = None
    dropped = False
    for e in rule.get("expr", []):
        if "match" in e:
            m = e["match"]
            payload = m.get("left", {}).get("payload", {})
            if m.get("op") != "==":
                continue
            if payload.get("protocol") == "ip" and payload.get("field") == "daddr":
                daddr = str(m["right"])
            elif payload.get("field") == "dport":
                proto, dport = str(payload.get("protocol")), int(m["right"])
        elif "counter" in e:
            counter = e["counter"]
        elif "drop" in e:
            dropped = True
    if daddr is None or dport is None or proto is None or counter is None or not dropped:
        return None
    return DropRule(
        rule_id=comment.removeprefix(_COMMENT_PREFIX),
        handle=int(rule["handle"]),
        daddr=daddr,
        dport=dport,
        protocol=proto,
        packets=int(counter["packets"]),
        bytes=int(counter["bytes"]),
    )


@contextlib.contextmanager
def _netlink_errors() -> Iterator[None]:
    try:
        yield
    except NftNetlinkError as exc:
        raise NftError(str(exc)) from exc


class PartitionTable:
    """One attempt's table. Context manager: creates table + chain, deletes the table on exit."""

    def __init__(self, run_id: str, index: int, *, netns: str | None) -> None:
        self.name = naming.nft_table_name(run_id, index)
        self.netns = netns
        self._created = False
        self._nl: NftNetlink | None = None

    def _writer(self) -> NftNetlink:
        if self._nl is None:
            raise NftError(f"table {self.name} not created")
        return self._nl

    def create(self) -> PartitionTable:
        with _netlink_errors():
            self._nl = NftNetlink(self.netns)
            try:
                self._nl.create_table(self.name, CHAIN)  # refuses an existing table
            except BaseException:
                self._nl.close()
                self._nl = None
                raise
        self._created = True
        return self

    def add_drop(self, daddr: str, dport: int, protocol: str = "tcp") -> DropRule:
        """Drop (with a counter) traffic to daddr:dport; returns the rule as read back by nft."""
        addr = ipaddress.IPv4Address(daddr)
        if protocol not in ("tcp", "udp") or not 0 < dport < 65536:
            raise NftError(f"unsupported endpoint {protocol}/{dport}")
        rule_id = secrets.token_hex(6)
        with _netlink_errors():
            self._writer().add_drop(
                self.name, CHAIN, str(addr), dport, protocol, comment=_COMMENT_PREFIX + rule_id
            )
        got = self.get_rule(rule_id)
        if got is None or (got.daddr, got.dport, got.protocol) != (str(addr), dport, protocol):
            raise NftError(f"rule {rule_id} not found as applied: {got}")
        return got

    def rules(self) -> list[DropRule]:
        out = json.loads(run_nft(["-j", "list", "table", FAMILY, self.name], netns=self.netns))
        parsed = (_parse_rule(x["rule"]) for x in out["nftables"] if "rule" in x)
        return [r for r in parsed if r is not None]

    def get_rule(self, rule_id: str) -> DropRule | None:
        return next((r for r in self.rules() if r.rule_id == rule_id), None)

    def remove_rule(self, rule_id: str) -> None:
        """Release one partition rule; raises if it is not there."""
        rule = self.get_rule(rule_id)
        if rule is None:
            raise NftError(f"rule {rule_id} not present in {self.name}")
        with _netlink_errors():
            self._writer().delete_rule(self.name, CHAIN, rule.handle)

    def delete(self) -> None:
        """Delete the table if we created it (and it still exists); end the writer."""
        try:
            if self._created and self._nl is not None:
                try:
                    self._nl.delete_table(self.name)
                except NftNetlinkError as exc:
                    if exc.errno != errno.ENOENT:
                        raise NftError(str(exc)) from exc
        finally:
            self._created = False
            if self._nl is not None:
                self._nl.close()
                self._nl = None

    def __enter__(self) -> PartitionTable:
        return self.create()

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.delete()
