"""The dashboard in a real headless Chromium (Debian's, through Selenium and its ChromeDriver)."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import NoSuchElementException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.support.browser import chromium, screenshot, wait_until
from tests.support.certs import make_pki
from tests.support.processes import Started, start_fake_apiserver, start_proxy

pytestmark = pytest.mark.browser
SAVED: list[Path] = []
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


def keep(driver: WebDriver, name: str, height: int | None = None) -> Path:
    """A screenshot kept as a test artifact (listed at the end of the run)."""
    path = screenshot(driver, name, height)
    SAVED.append(path)
    print(f"screenshot: {path}")
    return path


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
    started = start_fake_apiserver(pki, tmp_path_factory.mktemp("upstream"))
    started.extra["url"] = f"https://127.0.0.1:{started.ready['port']}"
    yield started
    started.stop()


@pytest.fixture(scope="module")
def proxy(upstream: Started, pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """`kube-fault-proxy serve` in front of the stand-in, control plane on loopback without a token."""
    started = start_proxy(upstream.extra["url"], pki, tmp_path_factory.mktemp("proxy"))
    yield started
    assert started.stop() == 0, started.log.read_text()


@pytest.fixture
def control(proxy: Started) -> Iterator[httpx.Client]:
    """The control plane, at pass-through with zeroed stats before and after each test."""
    with httpx.Client(base_url=proxy.ready["controlUrl"], timeout=10) as c:
        c.delete("/v1/active").raise_for_status()
        c.post("/v1/stats/reset").raise_for_status()
        yield c
        c.delete("/v1/active").raise_for_status()


class Binds:
    """Binding POSTs through the proxy from a thread, one every `every` seconds, each for a new pod."""

    def __init__(self, proxy: Started, prefix: str, every: float = 0.03) -> None:
        self._proxy, self._prefix, self._every = proxy, prefix, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0
        self.statuses: dict[int, int] = {}

    def _run(self) -> None:
        with httpx.Client(http2=True, verify=self._proxy.ready["caFile"], base_url=self._proxy.ready["proxyUrl"],
                          timeout=10) as c:
            while not self._stop.is_set():
                pod = f"{self._prefix}-{self.sent}"
                r = c.post(f"/api/v1/namespaces/default/pods/{pod}/binding",
                           json={"kind": "Binding", "apiVersion": "v1", "metadata": {"name": pod},
                                 "target": {"kind": "Node", "name": "node-1"}})
                self.sent += 1
                self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                time.sleep(self._every)

    def __enter__(self) -> Binds:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def open_dashboard(driver: WebDriver, control_url: str) -> None:
    """Load /ui/ and wait until its live feed is connected."""
    driver.get(f"{control_url}/ui/")
    wait_until(driver, "the live feed", lambda d: d.find_element(By.ID, "live").text == "live")


def text(driver: WebDriver, css: str) -> str:
    """The visible text of the first element matching css, read in one go (the page re-renders live)."""
    value = driver.execute_script(
        "const el = document.querySelector(arguments[0]); return el === null ? null : el.innerText;", css)
    if value is None:
        raise NoSuchElementException(css)
    return str(value).strip()


def rows(driver: WebDriver, css: str, attribute: str) -> list[str]:
    """One data attribute of every element matching css, read in one go."""
    got = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((el) => el.getAttribute(arguments[1]));",
        css, attribute)
    return [str(v) for v in got]


def number(driver: WebDriver, css: str) -> int:
    value = text(driver, css)
    return int(value) if value.isdigit() else -1
