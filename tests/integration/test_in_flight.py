"""Writes cut in flight, on the wire: a real `serve` before the TLS + HTTP/2 stand-in, whose creates with `?delay=S`
are answered S seconds later. An outage and a resetUpstream journal the writes they fail after the proxy forwarded
them (`inFlight`), each named as the ledger counts it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.control import activate
from tests.support.processes import start_fake_apiserver, start_proxy

OWNER = {"kind": "ReplicaSet", "name": "web", "uid": "rs-uid"}
POD_IN_FLIGHT = {"verb": "create", "resource": "pods", "namespace": "w", "generateName": "web-", "owner": OWNER}


def pod_body() -> str:
    """A ReplicaSet's pod create as JSON: generateName, and its controller among its owners."""
    refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-uid"},
            {"apiVersion": "apps/v1", **OWNER, "controller": True}]
    return json.dumps({"kind": "Pod", "apiVersion": "v1",
                       "metadata": {"generateName": "web-", "namespace": "w", "ownerReferences": refs},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}})


async def create(c: httpx.AsyncClient, path: str, body: str, delay: str = "") -> str:
    """One create through the proxy: `HTTP <status>`, or the error's type name."""
    try:
        r = await c.post(path, content=body, headers={"content-type": "application/json"},
                         params={"delay": delay} if delay else None)
        return f"HTTP {r.status_code}"
    except Exception as e:  # httpcore lets anyio.EndOfStream out of a connection closed mid-write
        return type(e).__name__


def journal(control: httpx.Client, event: str) -> list[dict[str, Any]]:
    return [r for r in control.get("/v1/journal", params={"since": 0}).json()["records"] if r["event"] == event]


def test_an_outage_journals_every_write_it_cut_in_flight(pki: Path, tmp_path: Path) -> None:
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")

    async def drive() -> list[str]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=20.0) as c:
            done = await create(c, "/api/v1/namespaces/w/pods", pod_body())  # answered before: not in flight
            slow = [asyncio.create_task(create(c, "/api/v1/namespaces/w/pods", pod_body(), "3")),
                    asyncio.create_task(create(c, "/api/v1/namespaces/w/configmaps",
                                               json.dumps({"kind": "ConfigMap", "metadata": {"name": "cm-1"}}),
                                               "3"))]
            await asyncio.sleep(1.0)  # both forwarded: the upstream holds them for 3 s
            with pytest.raises(httpx.HTTPError):
                await c.get("/outage-now")
            return [done, *await asyncio.gather(*slow)]

    try:
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            activate(control, "out", [{"name": "o", "match": {"paths": ["/outage-now"]}, "when": {"maxInjections": 1},
                                       "fault": {"outage": {"seconds": 1, "refuse": "close"}}}])
            done, *cut = asyncio.run(drive())
            assert done == "HTTP 201" and not [o for o in cut if o.startswith("HTTP")], (done, cut)
            [start] = journal(control, "outage-start")
            assert start["rule"] == "o" and start["inFlight"] == [
                POD_IN_FLIGHT, {"verb": "create", "resource": "configmaps", "namespace": "w", "name": "cm-1"}]
    finally:
        assert proxy.stop() == 0
        up.stop()


def test_a_reset_journals_the_writes_in_flight_on_its_connection_only(pki: Path, tmp_path: Path) -> None:
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")

    async def drive() -> tuple[str, str]:
        def client() -> httpx.AsyncClient:
            return httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=20.0, limits=httpx.Limits(max_connections=1))

        async with client() as a, client() as b:
            cut = asyncio.create_task(create(a, "/api/v1/namespaces/w/pods", pod_body(), "2"))
            kept = asyncio.create_task(create(b, "/api/v1/namespaces/x/pods", pod_body(), "2"))
            await asyncio.sleep(1.0)  # both forwarded, on two client connections
            with pytest.raises(httpx.HTTPError):
                await a.get("/reset-now")
            return await cut, await kept

    try:
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            activate(control, "reset", [{"name": "r", "match": {"paths": ["/reset-now"]},
                                         "when": {"maxInjections": 1}, "fault": {"resetUpstream": {}}}])
            cut, kept = asyncio.run(drive())
            # The cut create's client saw an error (mitmproxy answers a stream whose upstream died with a 502, or the
            # stream dies): a controller creates the pod again. The other connection's create was not touched.
            assert (cut == "HTTP 502" or not cut.startswith("HTTP")) and kept == "HTTP 201", (cut, kept)
            [inject] = [r for r in journal(control, "inject") if r["fault"] == "resetUpstream"]
            assert inject["request"]["path"] == "/reset-now" and inject["inFlight"] == [POD_IN_FLIGHT]
            time.sleep(0.2)
            assert journal(control, "outage-start") == []
    finally:
        assert proxy.stop() == 0
        up.stop()
