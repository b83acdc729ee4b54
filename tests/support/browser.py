"""Debian's headless Chromium driven through its ChromeDriver by Selenium (no browser download)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

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
            return (f"{path} is missing: run scripts/bootstrap as root "
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
