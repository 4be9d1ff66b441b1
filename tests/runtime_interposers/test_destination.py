"""Destination service: commits, scoped queries, idempotency capability, durable ledger."""

from __future__ import annotations

import http.client
from pathlib import Path

from runner.runtime.interposers.destination import DestinationService
from tests.runtime_interposers.conftest import effect, request


def test_commit_and_query_by_scope(destination: DestinationService) -> None:
    a = destination.address
    s1, b1 = request(a, "POST", "/effects", effect("repo-a", 1), {"X-AFB-Call-Id": "c1"})
    s2, b2 = request(a, "POST", "/effects", effect("repo-b", 2))
    s3, _ = request(a, "POST", "/effects", effect("repo-a", 3))
    assert (s1, s2, s3) == (201, 201, 201)
    assert b1["committed"] is True and b1["scope"] == "repo-a" and b1["effect_id"]
    assert b1["effect_id"] != b2["effect_id"]

    status, body = request(a, "GET", "/effects?scope=repo-a")
    assert status == 200 and body["scope"] == "repo-a"
    assert [i["payload"]["n"] for i in body["items"]] == [1, 3]
    assert all(i["scope"] == "repo-a" for i in body["items"])
    assert body["items"][0]["call_id"] == "c1" and body["items"][0]["effect_id"] == b1["effect_id"]
    assert request(a, "GET", "/effects?scope=nothing-here") == (
        200,
        {"scope": "nothing-here", "items": []},
    )


def test_content_type_and_bad_requests(destination: DestinationService) -> None:
    conn = http.client.HTTPConnection(*destination.address, timeout=5)
    conn.request("GET", "/effects?scope=x")
    resp = conn.getresponse()
    resp.read()
    assert resp.getheader("Content-Type") == "application/json"
    conn.close()
    assert request(destination.address, "GET", "/effects")[0] == 400
    assert request(destination.address, "POST", "/effects", {"kind": "patch"})[0] == 400
    assert request(destination.address, "GET", "/capabilities") == (
        200,
        {"idempotency_keys": False},
    )


def test_idempotency_keys_dedup_when_declared(run_dir: Path) -> None:
    with DestinationService(run_dir / "l.jsonl", idempotency_keys=True) as d:
        assert request(d.address, "GET", "/capabilities") == (200, {"idempotency_keys": True})
        s1, b1 = request(d.address, "POST", "/effects", effect("r", 1, key="k1"))
        s2, b2 = request(d.address, "POST", "/effects", effect("r", 1, key="k1"))
        s3, b3 = request(d.address, "POST", "/effects", effect("other", 1, key="k1"))
        assert (s1, s2, s3) == (201, 200, 201)
        assert b2["effect_id"] == b1["effect_id"] and b2["replayed"] is True
        assert b3["effect_id"] != b1["effect_id"]  # keys are per scope
        assert len(request(d.address, "GET", "/effects?scope=r")[1]["items"]) == 1


def test_idempotency_keys_ignored_when_not_declared(run_dir: Path) -> None:
    with DestinationService(run_dir / "l.jsonl", idempotency_keys=False) as d:
        _, b1 = request(d.address, "POST", "/effects", effect("r", 1, key="k1"))
        s2, b2 = request(d.address, "POST", "/effects", effect("r", 1, key="k1"))
        assert s2 == 201 and b2["effect_id"] != b1["effect_id"]
        assert len(request(d.address, "GET", "/effects?scope=r")[1]["items"]) == 2


def test_ledger_survives_restart(run_dir: Path) -> None:
    path = run_dir / "dest" / "ledger.jsonl"
    with DestinationService(path, idempotency_keys=True) as d:
        _, b1 = request(d.address, "POST", "/effects", effect("r", 1, key="k"))
        request(d.address, "POST", "/effects", effect("r", 2))
    with path.open("ab") as fh:
        fh.write(b'{"torn": ')  # a crash mid-append must not poison the restart
    with DestinationService(path, idempotency_keys=True) as d:
        items = request(d.address, "GET", "/effects?scope=r")[1]["items"]
        assert [i["payload"]["n"] for i in items] == [1, 2]
        s, b = request(d.address, "POST", "/effects", effect("r", 1, key="k"))
        assert s == 200 and b["effect_id"] == b1["effect_id"]  # dedup state is durable too
        _, b3 = request(d.address, "POST", "/effects", effect("r", 3))
        assert b3["effect_id"] not in {i["effect_id"] for i in items}
    with DestinationService(path) as d:  # and the torn bytes were not built upon
        items = request(d.address, "GET", "/effects?scope=r")[1]["items"]
        assert [i["payload"]["n"] for i in items] == [1, 2, 3]
