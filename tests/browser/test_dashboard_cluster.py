"""The dashboard on the local real control plane: kube-scheduler binds pods through the proxy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kube_fault_proxy.proxy.control.client import ControlClient
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.support.browser import keep, number, open_dashboard, rows, text, wait_until
from tests.support.cluster import all_running, api_client, start_cluster, stop_cluster, wait_for
from tests.support.processes import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.cluster]
PODS = 300
DOCS_SCREENSHOT = ROOT / "docs" / "images" / "dashboard.png"  # refreshed only with KFP_DOCS_SCREENSHOT=1


def test_dashboard_during_a_real_bind_fail_run(browser: WebDriver, tmp_path: Path) -> None:
    """A fault-matrix-like cell watched live: bind-fail-30pct clicked on, 300 pods, kube-scheduler retrying."""
    c = start_cluster(tmp_path / "cluster", "--nodes", "20", "--scheduler", "kube-scheduler", "--proxy")
    load: subprocess.Popen[bytes] | None = None
    try:
        control = ControlClient(c.control_url)
        open_dashboard(browser, c.control_url)
        browser.find_element(By.ID, "seed").send_keys("7")
        browser.find_element(By.ID, "ttl").send_keys("900")
        browser.find_element(By.CSS_SELECTOR, 'tr[data-profile="bind-fail-30pct"] button.activate').click()
        wait_until(browser, "the active profile", lambda d: text(d, "#active-name") == "bind-fail-30pct")
        assert control.http.get("/v1/active").json()["seed"] == 7

        load = subprocess.Popen(
            [sys.executable, "-m", "kube_fault_proxy", "load", "pods", "--kubeconfig", str(c.kubeconfig("admin")),
             "--count", str(PODS), "--rate", "10", "--namespace", "default"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        injected = 'tr[data-rule="fail-binds"] td.injected'
        wait_until(browser, "injections while kube-scheduler binds", lambda d: number(d, injected) >= 30, timeout=120)
        wait_until(browser, "failed binds on the chart",
                   lambda d: "failed 0" not in text(d, '.legend[data-chart="chart-binds"]'), timeout=30)
        assert rows(browser, '#journal tbody tr[data-event="inject"]', "data-seq"), "no inject in the journal tail"
        assert load.wait(120) == 0  # the charts now hold the whole wave, kube-scheduler still retrying
        keep(browser, "cluster-kube-scheduler-bind-fail-30pct")
        top = keep(browser, "cluster-kube-scheduler-bind-fail-30pct-top", height=1500)
        if os.environ.get("KFP_DOCS_SCREENSHOT") == "1":
            shutil.copyfile(top, DOCS_SCREENSHOT)
            print(f"updated {DOCS_SCREENSHOT}")

        api = api_client(c.kubeconfig("admin"))
        names = [p.metadata.name for p in api.list_namespaced_pod("default").items]
        assert len(names) == PODS
        wait_for("every pod bound and running", lambda: all_running(api, "default", names), timeout=240, interval=2)
        stats = control.stats()
        assert stats["bindsTotal"]["succeeded"] == PODS  # each pod bound exactly once…
        failed = stats["bindsTotal"]["failed"]
        assert failed == stats["rules"]["fail-binds"]["injected"] > 0  # …after failures that were all injected
        wait_until(browser, "the page's totals to agree",
                   lambda d: text(d, "#bind-totals").startswith(f"{PODS} succeeded (2xx) · {failed} failed")
                   and text(d, "#bind-totals").endswith(f"· {failed} injected"), timeout=10)

        browser.find_element(By.ID, "deactivate").click()
        wait_until(browser, "pass-through", lambda d: text(d, "#active-name") == "none (pass-through)")
        assert control.http.get("/v1/active").json()["profile"] is None
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait(10)
        stop_cluster(c)
