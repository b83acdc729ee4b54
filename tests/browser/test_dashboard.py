"""The dashboard against a real `serve` in front of the TLS + HTTP/2 stand-in, clicked in Chromium."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from tests.support.browser import Binds, keep, number, open_dashboard, rows, text, wait_until
from tests.support.processes import ROOT, Started, start_fake_apiserver, start_proxy

BAD = """apiVersion: kube-fault-proxy/v1
kind: FaultProfile
metadata: {name: bad}
spec:
  rules:
    - name: r
      match:
        resourcez: [pods]
      probability: 3
      when: {after: 10}
      fault: {abort: {status: 700}}
"""


def test_activate_by_click_watch_injections_filter_the_journal_and_deactivate(
    browser: WebDriver, proxy: Started, control: httpx.Client
) -> None:
    open_dashboard(browser, proxy.ready["controlUrl"])
    assert text(browser, "#active-name") == "none (pass-through)"
    assert "YUNIKORN-3128" in text(browser, 'tr[data-profile="bind-fail-30pct"] td.description')
    browser.find_element(By.ID, "seed").send_keys("11")
    browser.find_element(By.ID, "ttl").send_keys("300")
    browser.find_element(By.CSS_SELECTOR, 'tr[data-profile="bind-fail-30pct"] button.activate').click()

    wait_until(browser, "the active profile", lambda d: text(d, "#active-name") == "bind-fail-30pct")
    active = control.get("/v1/active").json()
    assert active["profile"] == "bind-fail-30pct" and active["seed"] == 11 and active["ttlSeconds"] == 300
    assert text(browser, "#active-seed") == "11" and text(browser, "#active-epoch") == str(active["epoch"])
    ttl = text(browser, "#active-ttl")
    assert ttl.endswith("s left of 300 s") and 295 <= int(ttl.split()[0]) <= 300, ttl
    injected = 'tr[data-rule="fail-binds"] td.injected'
    assert number(browser, injected) == 0

    with Binds(proxy, "ui", throttled_every=5) as binds:  # and the stand-in throttles some as APF does
        wait_until(browser, "a first injection", lambda d: number(d, injected) > 0)
        first = number(browser, injected)
        wait_until(browser, "more injections while binds flow", lambda d: number(d, injected) > first + 3)
        wait_until(browser, "the injected line on the binds chart",
                   lambda d: "injected 0" not in text(d, '.legend[data-chart="chart-binds"]'), timeout=10)
        wait_until(browser, "the throttled line on the binds chart",
                   lambda d: "throttled 0" not in text(d, '.legend[data-chart="chart-binds"]'), timeout=10)
        keep(browser, "standin-bind-fail-live")
    later = int(text(browser, "#active-ttl").split()[0])
    assert later < int(ttl.split()[0]), (ttl, later)  # the TTL counts down

    stats = control.get("/v1/stats").json()
    totals = stats["bindsTotal"]
    assert totals["failed"] == binds.statuses.get(500, 0) == stats["rules"]["fail-binds"]["injected"]
    assert totals["throttled"] == binds.statuses.get(429, 0) > 0  # the stand-in's 429s, apart from the failed
    wait_until(browser, "the final counters", lambda d: number(d, injected) == stats["rules"]["fail-binds"]["injected"]
               and text(d, 'tr[data-rule="fail-binds"] td.matched') == str(binds.sent)
               and text(d, "#bind-totals").startswith(f"{totals['succeeded']} succeeded (2xx) · {totals['failed']} "
                                                      "failed (any other answer, or none) · "
                                                      f"{totals['throttled']} throttled (429 with Retry-After"))

    # the journal tail, filtered by event, rule and object name
    journal = control.get("/v1/journal", params={"since": 0, "limit": 10000}).json()["records"]
    one = next(r for r in journal if r["event"] == "inject" and r.get("rule") == "fail-binds")
    Select(browser.find_element(By.ID, "filter-event")).select_by_value("inject")
    browser.find_element(By.ID, "filter-rule").send_keys("fail-binds")
    browser.find_element(By.ID, "filter-name").send_keys(one["request"]["name"])
    assert rows(browser, "#journal tbody tr", "data-seq") == [str(one["seq"])]
    assert text(browser, "#journal tbody tr td.object") == f"default/{one['request']['name']}"
    Select(browser.find_element(By.ID, "filter-event")).select_by_value("activate")
    browser.find_element(By.ID, "filter-rule").clear()
    browser.find_element(By.ID, "filter-name").clear()
    browser.find_element(By.ID, "filter-name").send_keys(" ")  # an input event: re-filter
    events = rows(browser, "#journal tbody tr", "data-event")
    assert events and set(events) == {"activate"}

    browser.find_element(By.ID, "deactivate").click()
    wait_until(browser, "pass-through", lambda d: text(d, "#active-name") == "none (pass-through)")
    assert control.get("/v1/active").json()["profile"] is None
    assert browser.find_element(By.ID, "deactivate").get_attribute("disabled") is not None


def test_an_invalid_upload_shows_the_loaders_errors_as_the_cli_prints_them(
    browser: WebDriver, proxy: Started, control: httpx.Client, tmp_path: Path
) -> None:
    open_dashboard(browser, proxy.ready["controlUrl"])
    editor = browser.find_element(By.ID, "editor")
    editor.clear()
    editor.send_keys(BAD)
    browser.find_element(By.ID, "upload").click()
    wait_until(browser, "the upload's answer", lambda d: d.find_element(By.ID, "upload-result").is_displayed())
    shown = text(browser, "#upload-result")
    (tmp_path / "bad.yaml").write_text(BAD)
    cli = subprocess.run([sys.executable, "-m", "kube_fault_proxy", "profiles", "validate", str(tmp_path / "bad.yaml")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2
    assert shown == cli.stderr.strip().replace(str(tmp_path / "bad.yaml"), "PUT /v1/profiles/bad")
    assert shown.splitlines() == [
        "PUT /v1/profiles/bad:8:9: spec.rules[0].match.resourcez: unknown field",
        "PUT /v1/profiles/bad:9:20: spec.rules[0].probability: Input should be less than or equal to 1",
        "PUT /v1/profiles/bad:10:21: spec.rules[0].when.after: a duration needs a unit, like '10s' or '250ms' (got 10)",
        "PUT /v1/profiles/bad:11:31: spec.rules[0].fault.abort.status: Input should be less than or equal to 599",
    ]
    assert "error" in (browser.find_element(By.ID, "upload-result").get_attribute("class") or "")
    assert control.get("/v1/profiles/bad").status_code == 404
    keep(browser, "standin-invalid-upload")

    # the same editor fixes it: the profile appears in the library, ready to activate
    editor.clear()
    editor.send_keys(BAD.replace("resourcez", "resources").replace("probability: 3", "probability: 1")
                     .replace("after: 10", "after: 10s").replace("700", "503"))
    browser.find_element(By.ID, "upload").click()
    wait_until(browser, "the uploaded profile in the library",
               lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-profile="bad"]'))
    assert text(browser, "#upload-result") == "added bad: 1 rule(s)"
    assert control.get("/v1/profiles/bad").json()["spec"]["rules"][0]["fault"] == {"abort": {"status": 503}}
    control.delete("/v1/profiles/bad").raise_for_status()
    wait_until(browser, "the deleted profile gone from the library",
               lambda d: not d.find_elements(By.CSS_SELECTOR, 'tr[data-profile="bad"]'))


def test_ttl_revert_and_an_outage_show_up_live(browser: WebDriver, proxy: Started, control: httpx.Client) -> None:
    doc = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile",
           "metadata": {"name": "ui-outage", "description": "a 3 s outage at the first request"},
           "spec": {"rules": [{"name": "down", "when": {"maxInjections": 1},
                               "fault": {"outage": {"seconds": 3, "refuse": "close"}}}]}}
    control.put("/v1/profiles/ui-outage", json=doc).raise_for_status()
    open_dashboard(browser, proxy.ready["controlUrl"])
    browser.find_element(By.ID, "ttl").send_keys("8")
    wait_until(browser, "the new profile in the library",
               lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-profile="ui-outage"] button.activate'))
    browser.find_element(By.CSS_SELECTOR, 'tr[data-profile="ui-outage"] button.activate').click()
    wait_until(browser, "the active profile", lambda d: text(d, "#active-name") == "ui-outage")
    with (httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=5) as c,
          contextlib.suppress(httpx.HTTPError)):  # the outage may close this very connection
        c.get("/api/v1/pods")
    wait_until(browser, "the outage banner", lambda d: text(d, "#outage").startswith("OUTAGE since"), timeout=5)
    assert "3 s, new connections close" in text(browser, "#outage")
    assert "on" in (browser.find_element(By.ID, "outage").get_attribute("class") or "")
    keep(browser, "standin-outage")
    wait_until(browser, "the outage's end", lambda d: text(d, "#outage").startswith("none now"), timeout=8)
    wait_until(browser, "the TTL revert", lambda d: text(d, "#active-name") == "none (pass-through)", timeout=10)
    assert "ttl" in text(browser, '#journal tbody tr[data-event="deactivate"]')
    control.delete("/v1/profiles/ui-outage").raise_for_status()


def test_the_token_is_required_when_the_control_plane_is_exposed(
    browser: WebDriver, upstream: Started, pki: Path, tmp_path: Path
) -> None:
    exposed = start_proxy(upstream.extra["url"], pki, tmp_path / "proxy", "--control", "0.0.0.0:0",
                          "--control-token", "t0ken")
    try:
        port = exposed.ready["controlUrl"].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/v1/events/stream").status_code == 401
        browser.get(f"{url}/ui/")  # the page itself is public: it holds no data
        wait_until(browser, "the token form", lambda d: d.find_element(By.ID, "login").is_displayed())
        assert not browser.find_element(By.ID, "dashboard").is_displayed()
        keep(browser, "standin-token-form")
        browser.find_element(By.ID, "token-input").send_keys("wrong")
        browser.find_element(By.ID, "token-submit").click()
        wait_until(browser, "the refusal", lambda d: text(d, "#login-error") == "that token was refused")
        assert not browser.find_element(By.ID, "dashboard").is_displayed()

        browser.find_element(By.ID, "token-input").send_keys("t0ken")
        browser.find_element(By.ID, "token-submit").click()
        wait_until(browser, "the live feed", lambda d: text(d, "#live") == "live")
        assert text(browser, "#active-name") == "none (pass-through)"
        assert "t0ken" not in browser.current_url
        assert browser.execute_script("return sessionStorage.getItem('kfp-control-token')") == "t0ken"
        browser.find_element(By.CSS_SELECTOR, 'tr[data-profile="bind-slow"] button.activate').click()
        wait_until(browser, "the active profile", lambda d: text(d, "#active-name") == "bind-slow")
        auth = {"Authorization": "Bearer t0ken"}
        assert httpx.get(f"{url}/v1/active", headers=auth).json()["profile"] == "bind-slow"

        browser.find_element(By.ID, "link-metrics").click()  # with a token: fetched with the header
        wait_until(browser, "the metrics", lambda d: 'kfp_active_profile{profile="bind-slow"} 1' in text(d, "#metrics-text"))
        browser.find_element(By.ID, "metrics-close").click()

        browser.refresh()  # the token lasts for the tab's session
        wait_until(browser, "the live feed after a reload", lambda d: text(d, "#live") == "live")
        browser.find_element(By.ID, "forget-token").click()
        wait_until(browser, "the token form again", lambda d: d.find_element(By.ID, "login").is_displayed())
        assert browser.execute_script("return sessionStorage.getItem('kfp-control-token')") is None
    finally:
        assert exposed.stop() == 0, exposed.log.read_text()


def test_stopping_the_proxy_ends_the_stream_and_the_page_says_so(
    browser: WebDriver, pki: Path, tmp_path: Path
) -> None:
    up = start_fake_apiserver(pki, tmp_path / "up")
    own = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")
    try:
        open_dashboard(browser, own.ready["controlUrl"])
        started = time.monotonic()
        assert own.stop() == 0, own.log.read_text()  # an open SSE stream does not hold up shutdown
        assert time.monotonic() - started < 5
        wait_until(browser, "the page to notice", lambda d: text(d, "#live") == "reconnecting…")
    finally:
        own.stop()
        up.stop()
