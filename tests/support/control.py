"""Shorthands over the control API's one client for tests that also call the API by hand (an httpx.Client)."""

from __future__ import annotations

from typing import Any

import httpx
from kube_fault_proxy.proxy.control.client import ControlClient


def activate(control: httpx.Client, name: str, rules: list[dict[str, Any]],
             seed: int | None = None, ttl: float | None = None) -> dict[str, Any]:
    """Upload a profile made of these rules and make it active."""
    return ControlClient(control).activate(name, seed, ttl, rules=rules)


def injections(control: httpx.Client, since: int | None = None) -> list[dict[str, Any]]:
    """The journal's inject records written since `since` (default: since the test began)."""
    if since is None:
        since = int(control.headers["x-test-journal-cursor"])
    return ControlClient(control).injections(since)
