"""proxy.mitm.patches: a change is applied only where its verified source is installed, skipped (and said so,
once) otherwise; every change says what it replaces and what it bought; the stock path skips them all."""

from __future__ import annotations

import asyncio
import importlib
import logging
import pkgutil
from collections.abc import Iterator

import pytest
from kube_fault_proxy.proxy.mitm import patches
from kube_fault_proxy.proxy.mitm.patches import context_fork, stream_counts, stream_ticks
from mitmproxy import master, options
from mitmproxy.proxy import context


def new_master(loop: asyncio.AbstractEventLoop) -> master.Master:
    return master.Master(options.Options(), event_loop=loop)


@pytest.fixture
def fresh_master() -> Iterator[master.Master]:
    loop = asyncio.new_event_loop()
    yield new_master(loop)
    patches.uninstall()
    patches.install(patches.Target(new_master(loop)))  # the proxy's state, as the other tests expect
    loop.close()


def test_every_change_is_a_module_that_says_what_it_replaces_and_bought() -> None:
    assert len({patches.name_of(c) for c in patches.CHANGES}) == len(patches.CHANGES) >= 11
    for change in patches.CHANGES:
        doc = change.__doc__ or ""
        assert "What it replaces" in doc and "What it bought" in doc, patches.name_of(change)
        assert change.PINNED and set(change.PINNED) == set(change.ORIGINALS), patches.name_of(change)
        assert callable(change.apply) and callable(change.revert)
        assert patches.mismatch(change) is None, f"{patches.name_of(change)}: {patches.mismatch(change)}"


def test_with_the_verified_sources_every_change_is_applied(fresh_master: master.Master) -> None:
    done = patches.install(patches.Target(fresh_master))
    assert [(o.name, o.applied) for o in done] == [(patches.name_of(c), True) for c in patches.CHANGES]
    assert context.Context.fork is context_fork._fork
    assert patches.outcomes() == done


def test_a_mismatched_source_skips_its_change_and_says_so_once(
        fresh_master: master.Master, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    patches.uninstall()
    monkeypatch.setitem(context_fork.PINNED, "mitmproxy.proxy.context.Context.fork", "0000000000000000")
    with caplog.at_level(logging.WARNING, logger=patches.__name__):
        done = {o.name: o for o in patches.install(patches.Target(fresh_master))}
    skipped = done["context_fork"]
    assert not skipped.applied
    assert "mitmproxy.proxy.context.Context.fork is not the source it was verified against" in skipped.reason
    assert "verified 0000000000000000" in skipped.reason and "mitmproxy 12.3" in skipped.reason
    assert context.Context.fork is context_fork.ORIGINALS["mitmproxy.proxy.context.Context.fork"]  # the library's own
    assert all(o.applied for name, o in done.items() if name != "context_fork")  # the others are independent
    [warning] = [r for r in caplog.records if "context_fork" in r.getMessage()]
    assert "is skipped, the library's own code is used" in warning.getMessage()


def test_an_unreadable_source_skips_its_change(fresh_master: master.Master, monkeypatch: pytest.MonkeyPatch) -> None:
    patches.uninstall()
    monkeypatch.setitem(stream_counts.ORIGINALS, "h2.connection.H2Connection._open_streams", len)  # a builtin
    done = {o.name: o for o in patches.install(patches.Target(fresh_master))}
    assert not done["stream_counts"].applied and "cannot be read" in done["stream_counts"].reason


def test_the_stock_path_skips_every_change(fresh_master: master.Master) -> None:
    patches.uninstall()
    done = patches.install(patches.Target(fresh_master), enabled=False)
    assert [o.applied for o in done] == [False] * len(patches.CHANGES)
    assert {o.reason for o in done} == {"turned off (--stock-mitmproxy): mitmproxy as it ships"}
    assert context.Context.fork is context_fork.ORIGINALS["mitmproxy.proxy.context.Context.fork"]
    assert type(fresh_master.addons).__name__ == "AddonManager"  # mitmproxy's own dispatch


def test_every_module_of_the_package_is_gated_or_says_why_it_needs_no_gate() -> None:
    """A change is gated by install(); a module that is no change is gated at run time by its own pins
    (`verified()`), or is a read with no replacement and says so in its header."""
    changes = {patches.name_of(c) for c in patches.CHANGES}
    seen = set()
    for info in pkgutil.iter_modules(patches.__path__):
        module = importlib.import_module(f"{patches.__name__}.{info.name}")
        seen.add(info.name)
        if info.name in changes:
            continue
        doc = module.__doc__ or ""
        if callable(getattr(module, "verified", None)):
            assert module.PINNED and set(module.PINNED) == set(module.ORIGINALS), info.name
            assert patches.mismatch(module) is None and module.verified(), info.name
        else:
            assert "No gate: it is a read with no replacement." in doc, (
                f"patches/{info.name}.py is neither a change, nor gated (verified()), nor says why it needs no gate")
    assert changes < seen and {"internals", "stream_ticks"} <= seen - changes


def test_stream_ticks_are_off_where_what_they_rely_on_moved(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    qualname = "mitmproxy.proxy.layers.http.HttpLayer._handle_event"
    monkeypatch.setitem(stream_ticks.PINNED, qualname, "0000000000000000")
    monkeypatch.setattr(stream_ticks, "_verified", None)
    with caplog.at_level(logging.WARNING, logger=stream_ticks.__name__):
        assert not stream_ticks.verified()
        assert not stream_ticks.wake("no-such-client", object())  # off: no handler is even looked up
    [warning] = caplog.records
    assert "stream ticks are off" in warning.getMessage() and qualname in warning.getMessage()
