"""Debian's headless Chromium driven through its ChromeDriver by Selenium (no browser download)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from tests.support.processes import Started

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# As root, in a sandbox with no network: no sandboxing, and none of Chromium's own calls home.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,2000"]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "reports" / "browser"  # git-ignored; kept as test artifacts


def missing() -> str | None:
    """Why the browser cannot start here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return (f"{path} is missing: run scripts/bootstrap --with-browser as root "
                    "(it installs Debian's chromium and chromium-driver)")
    return None


@contextlib.contextmanager
def chromium(log: Path | None = None) -> Iterator[WebDriver]:
    """A fresh headless Chromium with its own empty profile directory, quit on exit."""
    reason = missing()
    if reason is not None:
        raise RuntimeError(reason)
    profile = Path(tempfile.mkdtemp(prefix="kfp-chromium-"))
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(str(CHROMEDRIVER), log_output=str(log) if log else None)
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_until(driver: WebDriver, what: str, check: Callable[[WebDriver], Any], timeout: float = 15) -> Any:
    """Poll check until it returns something truthy; the failure names what was awaited."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(check, f"timed out waiting for {what}")


def screenshot(driver: WebDriver, name: str, height: int | None = None) -> Path:
    """Save the page (all of it, or its top `height` pixels) as reports/browser/NAME.png; returns the path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if height is None:
        height = int(driver.execute_script("return document.documentElement.scrollHeight")) + 40
    driver.set_window_size(1440, max(600, min(height, 4000)))
    driver.save_screenshot(str(path))
    return path


# -- what the dashboard tests read off the page, and a Binding load beside it --------------------------------

SAVED: list[Path] = []


def keep(driver: WebDriver, name: str, height: int | None = None) -> Path:
    """A screenshot kept as a test artifact (listed at the end of the run)."""
    path = screenshot(driver, name, height)
    SAVED.append(path)
    print(f"screenshot: {path}")
    return path


class Binds:
    """Binding POSTs through the proxy from a thread, one every `every` seconds, each for a new pod;
    with `throttled_every` N, every Nth asks the stand-in for APF's 429 with Retry-After (`?throttle=1`)."""

    def __init__(self, proxy: Started, prefix: str, every: float = 0.03, throttled_every: int = 0) -> None:
        self._proxy, self._prefix, self._every, self._throttled_every = proxy, prefix, every, throttled_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0
        self.statuses: dict[int, int] = {}

    def _run(self) -> None:
        with httpx.Client(http2=True, verify=self._proxy.ready["caFile"], base_url=self._proxy.ready["proxyUrl"],
                          timeout=10) as c:
            while not self._stop.is_set():
                pod = f"{self._prefix}-{self.sent}"
                throttled = self._throttled_every and (self.sent + 1) % self._throttled_every == 0
                r = c.post(f"/api/v1/namespaces/default/pods/{pod}/binding" + ("?throttle=1" if throttled else ""),
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
