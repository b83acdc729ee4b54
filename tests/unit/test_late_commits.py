"""The late commits' addon (proxy.mitm.late_commits) after the fault addon, as in serve's chain, with a stand-in
apiserver behind the proxy's own client: the client gets its error at once, the write goes later, once, as the
client sent it; it is journaled, and the revision log counts it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from kube_fault_proxy.proxy.mitm.addon import FaultAddon
from kube_fault_proxy.proxy.mitm.late_commits import LateCommits
from kube_fault_proxy.proxy.mitm.stale_reads import StaleAnswers
from kube_fault_proxy.proxy.stale_views import StaleViews
from mitmproxy.addons import proxyserver
from mitmproxy.test import taddons

from tests.support.builders import profile
from tests.support.mitm import JSON, events, exchange, flow, runtime

WRITE = {"verbs": ["create"], "resources": ["pods"]}
POD = json.dumps({"kind": "Pod", "metadata": {"name": "a"}}).encode()


def test_the_write_goes_once_later_as_the_client_sent_it_and_is_counted(tmp_path: Path) -> None:
    rt = runtime(tmp_path, profile({"name": "late", "match": WRITE, "when": {"maxInjections": 1},
                                    "fault": {"failThenCommit": {"status": 504, "commitAfterSeconds": 0.05}}},
                                   name="p", seed=1))
    rt.activations.activate("p")
    sent: list[httpx.Request] = []

    def apiserver(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json={"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "42"}})

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            stale = StaleViews(rt.counters, rt.clock)
            late = LateCommits(rt.counters, stale.answered_late, lambda: httpx.AsyncClient(
                base_url="https://apiserver", transport=httpx.MockTransport(apiserver)))
            chain = [StaleAnswers(stale), FaultAddon(rt), late]
            f = flow("POST", "/api/v1/namespaces/default/pods", POD, [JSON, (b"authorization", b"Bearer t")])
            await exchange(chain, f)
            assert f.response is not None and f.response.status_code == 504, "the client's error, at once"
            assert sent == [] and len(late.tasks) == 1
            again = flow("POST", "/api/v1/namespaces/default/pods", POD, [JSON])
            await exchange(chain, again)
            assert again.response is None, "passed through: the rule's one turn is spent"
            await asyncio.gather(*late.tasks)
            [write] = sent
            assert (write.method, write.url.path, write.content) == ("POST", "/api/v1/namespaces/default/pods", POD)
            assert write.headers["authorization"] == "Bearer t" and "host" not in dict(write.headers.raw)
            [record] = events(rt, "late-commit")
            assert (record["committed"], record["upstreamStatus"], record["resourceVersion"], record["rule"]) == (
                True, 201, "42", "late")
            assert stale.log.newest(("", "pods")) == 42, "the revision log counted the write"
            await late.done()

    asyncio.run(main())


def test_a_request_nothing_decided_for_schedules_nothing(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    late = LateCommits(rt.counters, lambda *a: None, lambda: httpx.AsyncClient())

    async def main() -> None:
        f = flow("POST", "/api/v1/namespaces/default/pods", POD, [JSON])
        late.request(f)
        assert late.tasks == set()

    asyncio.run(main())
