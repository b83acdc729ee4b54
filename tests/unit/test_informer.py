"""The informer: list, watch from the list's resourceVersion, relist on 410, every change reported."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from kube_fault_proxy.kube.informer import Informer, expired
from kube_fault_proxy.kube.kubeapi import ApiError, Pod
from lightkube.models.meta_v1 import Status
from lightkube.types import OnErrorAction

from tests.support.builders import Listing


def pod(name: str, rv: int, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}, "status": {"phase": phase}}




class WatchesEnded(Exception):
    """The fake has no more watches to serve: the test is over."""


class FakeClient:
    """Serves lists and watches from scripts; remembers what it was asked."""

    def __init__(self, lists: list[tuple[list[dict[str, Any]], str]], watches: list[list[Any]]) -> None:
        self.lists, self.watches = lists, watches
        self.listed: list[dict[str, Any]] = []
        self.watched_from: list[str] = []

    def list(self, resource: Any, **scope: Any) -> Listing:
        self.listed.append(scope)
        objs, rv = self.lists.pop(0)
        return Listing(objs, rv)

    async def watch(self, resource: Any, *, resource_version: str, server_timeout: int, on_error: Any,
                    **scope: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(resource_version)
        if not self.watches:
            raise WatchesEnded
        for event in self.watches.pop(0):
            await asyncio.sleep(0)
            if isinstance(event, Exception):
                raise event
            yield event


EXPIRED = ApiError(status=Status(code=410, reason="Expired", message="too old resource version: 1 (20)"))
GONE = httpx2.HTTPStatusError("gone", request=httpx2.Request("GET", "https://k/api/v1/pods"),
                              response=httpx2.Response(410))


@pytest.mark.parametrize(("lists", "watches", "changes", "store", "watched_from"), [
    pytest.param(
        [([pod("a", 1), pod("b", 2)], "10")],
        [[("MODIFIED", pod("a", 11)), ("DELETED", pod("b", 12)), ("ADDED", pod("c", 13))]],
        [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")],
        {"a": "11", "c": "13"}, ["10", "13"], id="list-then-watch"),
    pytest.param(
        [([pod("a", 1), pod("b", 2)], "10"), ([pod("a", 1), pod("c", 21)], "30")],
        [[("ADDED", pod("c", 11)), EXPIRED]],
        [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("DELETED", "b"), ("MODIFIED", "c")],
        {"a": "1", "c": "21"}, ["10", "30"], id="410-event-relists-and-reports-what-vanished"),
    pytest.param(
        [([pod("a", 1)], "10"), ([], "40")],
        [[GONE]],
        [("ADDED", "a"), ("DELETED", "a")],
        {}, ["10", "40"], id="410-status-relists"),
    pytest.param(
        [([pod("a", 1)], "10")],
        [[("BOOKMARK", {"metadata": {"resourceVersion": "15"}})]],
        [("ADDED", "a")],
        {"a": "1"}, ["10", "15"], id="bookmark-moves-the-resource-version-only"),
])
def test_the_store_follows_lists_watches_and_relists(
    lists: list[tuple[list[dict[str, Any]], str]], watches: list[list[Any]], changes: list[tuple[str, str]],
    store: dict[str, str], watched_from: list[str]
) -> None:
    listings = len(lists)
    client = FakeClient(lists, watches)
    seen: list[tuple[str, str]] = []
    informer = Informer(client, Pod, namespace="ns", labels={"l": "v"},  # type: ignore[arg-type]
                        on_change=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
    with pytest.raises(WatchesEnded):
        asyncio.run(informer.run())
    assert seen == changes
    assert {name: obj["metadata"]["resourceVersion"] for (_, name), obj in informer.store.items()} == store
    assert client.watched_from == watched_from
    assert client.listed == [{"namespace": "ns", "labels": {"l": "v"}, "fields": None}] * listings
    assert informer.relists == listings


def test_another_apiserver_error_is_raised_not_relisted() -> None:
    refused = ApiError(status=Status(code=403, reason="Forbidden", message="no"))
    client = FakeClient([([], "1")], [[refused]])
    with pytest.raises(ApiError):
        asyncio.run(Informer(client, Pod).run())  # type: ignore[arg-type]
    assert client.watched_from == ["1"]


def test_cancelling_the_task_stops_it_and_handlers_may_be_coroutines() -> None:
    client = FakeClient([([], "1")], [[("ADDED", pod("a", 2)), ("ADDED", pod("b", 3))]])
    first = asyncio.Event()
    seen: list[str] = []

    async def handler(kind: str, obj: dict[str, Any]) -> None:
        seen.append(obj["metadata"]["name"])
        first.set()
        await asyncio.sleep(3600)  # a slow handler: the cancel must still land

    async def scenario() -> bool:
        informer = Informer(client, Pod, on_change=handler)  # type: ignore[arg-type]
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(first.wait(), 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled()

    assert asyncio.run(scenario()) is True
    assert seen == ["a"]


@pytest.mark.parametrize(("error", "action"), [
    (httpx2.ConnectError("refused"), OnErrorAction.RETRY),
    (httpx2.ReadError("reset"), OnErrorAction.RETRY),
    (EXPIRED, OnErrorAction.RAISE),
    (GONE, OnErrorAction.RAISE),
    (ApiError(status=Status(code=500, message="boom")), OnErrorAction.RAISE),
])
def test_transport_errors_resume_the_watch_and_apiserver_answers_go_up(error: Exception,
                                                                       action: OnErrorAction) -> None:
    informer = Informer(FakeClient([], []), Pod, retry_seconds=0.5)  # type: ignore[arg-type]
    result = informer._on_error(error, 3)
    assert result.action is action
    assert result.sleep == (1.5 if action is OnErrorAction.RETRY else 0)


@pytest.mark.parametrize(("error", "is_expired"), [(EXPIRED, True), (GONE, True),
                                                   (ApiError(status=Status(code=404)), False),
                                                   (httpx2.ReadError("x"), False)])
def test_expired(error: Exception, is_expired: bool) -> None:
    assert expired(error) is is_expired
