"""The dashboard in a real headless Chromium (Debian's, through Selenium and its ChromeDriver)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.support.browser import SAVED, chromium, keep
from tests.support.certs import make_pki
from tests.support.processes import Started
from tests.support.standin import pass_through, proxy_in_front, standin_upstream

pytestmark = pytest.mark.browser
FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SAVED:
        terminalreporter.write_sep("-", "dashboard screenshots")
        for path in SAVED:
            terminalreporter.write_line(str(path))


@pytest.fixture
def browser(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WebDriver]:
    """A fresh Chromium per test (its own profile, so its own sessionStorage); a failure keeps a screenshot."""
    with chromium(tmp_path / "chromedriver.log") as driver:
        yield driver
        if request.node.stash.get(FAILED, False):
            keep(driver, f"FAILED-{request.node.name}")
            print("page state:", driver.execute_script(
                "return typeof state === 'undefined' ? null : JSON.stringify({tick: state.tick && state.tick.seq, "
                "library: state.library, journalSeq: state.journalSeq, live: document.getElementById('live').textContent})"))
            for entry in driver.get_log("browser"):
                print(f"console: {entry['level']} {entry['message']}")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def upstream(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """The TLS + HTTP/2 stand-in apiserver."""
    with standin_upstream(pki, tmp_path_factory.mktemp("upstream")) as started:
        yield started


@pytest.fixture(scope="module")
def proxy(upstream: Started, pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """`kube-fault-proxy serve` in front of the stand-in, control plane on loopback without a token."""
    with proxy_in_front(upstream, pki, tmp_path_factory.mktemp("proxy")) as started:
        yield started


@pytest.fixture
def control(proxy: Started) -> Iterator[httpx.Client]:
    """The control plane, at pass-through with zeroed stats before and after each test."""
    with httpx.Client(base_url=proxy.ready["controlUrl"], timeout=10) as c:
        pass_through(c)
        yield c
        c.delete("/v1/active").raise_for_status()


