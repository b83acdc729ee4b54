"""Lean hook dispatch (proxy.mitm.hooks): same handlers, same order, same error handling as mitmproxy's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from kube_fault_proxy.proxy.mitm import patches
from kube_fault_proxy.proxy.mitm.patches import dispatch as lean
from mitmproxy import exceptions, hooks, master, options
from mitmproxy.test import tflow


class Recorder:
    def __init__(self, name: str, calls: list[str], fail: bool = False, halt: bool = False) -> None:
        self.name, self.calls, self.fail, self.halt = name, calls, fail, halt

    def request(self, flow: Any) -> None:
        self.calls.append(f"{self.name}.request")
        if self.fail:
            raise ValueError(f"{self.name} broke")
        if self.halt:
            raise exceptions.AddonHalt()


class AsyncRecorder(Recorder):
    async def request(self, flow: Any) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.calls.append(f"{self.name}.async-request")


class Updates:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def update(self, flows: Any) -> None:
        self.calls.append(f"update {len(flows)}")


def dispatch(*addons: Any) -> None:
    async def go() -> None:
        m = master.Master(options.Options())
        lean.install(m)
        m.addons.add(*addons)
        await m.addons.handle_lifecycle(hooks.all_hooks["request"](tflow.tflow()))
    asyncio.run(go())


def test_the_master_uses_the_lean_manager_and_refuses_a_late_install() -> None:
    async def go() -> None:
        m = master.Master(options.Options())
        lean.install(m)
        assert isinstance(m.addons, lean.LeanAddonManager)
        m.addons.add(Recorder("a", []))
        with pytest.raises(RuntimeError, match="before adding addons"):
            lean.install(m)
    asyncio.run(go())


def test_implementers_run_in_chain_order_sync_and_async() -> None:
    calls: list[str] = []
    dispatch(Recorder("a", calls), object(), AsyncRecorder("b", calls), Recorder("c", calls))
    assert calls == ["a.request", "b.async-request", "c.request"]


def test_an_error_is_logged_and_the_next_addon_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    with caplog.at_level(logging.ERROR):
        dispatch(Recorder("a", calls, fail=True), Recorder("b", calls))
    assert calls == ["a.request", "b.request"]
    assert "Addon error: a broke" in caplog.text


def test_addon_halt_ends_the_hook() -> None:
    calls: list[str] = []
    dispatch(Recorder("a", calls, halt=True), Recorder("b", calls))
    assert calls == ["a.request"]


def test_the_update_hook_runs_only_when_an_addon_has_one() -> None:
    calls: list[str] = []
    dispatch(Recorder("a", calls))
    assert calls == ["a.request"]
    calls.clear()
    dispatch(Recorder("a", calls), Updates(calls))
    assert calls == ["a.request", "update 1"]


def test_changing_the_chain_drops_the_handler_table() -> None:
    calls: list[str] = []

    async def go() -> None:
        m = master.Master(options.Options())
        lean.install(m)
        m.addons.add(Recorder("a", calls))
        event = hooks.all_hooks["request"](tflow.tflow())
        await m.addons.handle_lifecycle(event)
        m.addons.add(Recorder("b", calls))
        await m.addons.handle_lifecycle(event)
        m.addons.remove(m.addons.chain[0])
        await m.addons.handle_lifecycle(event)
    asyncio.run(go())
    assert calls == ["a.request", "a.request", "b.request", "b.request"]


def test_what_the_dispatch_reproduces_is_mitmproxys_verified_source() -> None:
    assert patches.mismatch(lean) is None, "mitmproxy changed its AddonManager: re-read dispatch.py, then its pins"
