"""The one client of the control API (httpx, no FastAPI): what `ctl`, the pytest plugin, the scenario runner,
the search and the tests call a running proxy's control plane with."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

JOURNAL_PAGE = 10000  # the most records the server returns in one page


def profile_document(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A FaultProfile document made of these rules."""
    return {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": name},
            "spec": {"rules": rules}}


class ControlError(Exception):
    """The control plane answered with an error; `status` is its HTTP status, the message its own."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(message)
        self.method, self.path, self.status = method, path, status


@dataclass(frozen=True)
class JournalPage:
    """Journal records after a cursor, and the cursor after them."""

    records: list[dict[str, Any]]
    next: int


class ControlClient:
    """A running proxy's control plane: profiles, the active profile, stats, the journal, the cluster source."""

    def __init__(self, base_url: str | httpx.Client, token: str | None = None, timeout: float = 10.0) -> None:
        """From a URL (the client owns its connection), or over an httpx.Client the caller owns."""
        if isinstance(base_url, httpx.Client):
            self.http, self._owned = base_url, False
        else:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            self.http, self._owned = httpx.Client(base_url=base_url, headers=headers, timeout=timeout), True

    @property
    def url(self) -> str:
        """The control plane's base URL."""
        return str(self.http.base_url).rstrip("/")

    def close(self) -> None:
        """Close the connection, when the client opened it."""
        if self._owned:
            self.http.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; the JSON answer, or ControlError with the server's own message."""
        r = self.http.request(method, path, **kwargs)
        if r.status_code >= 400:
            try:
                body = r.json()
                message = (body.get("message") or body.get("detail") or r.text) if isinstance(body, dict) else r.text
            except ValueError:
                message = r.text
            raise ControlError(method, path, r.status_code, str(message))
        return r.json()

    # -- profiles -------------------------------------------------------------------------------------------
    def profiles(self) -> list[dict[str, Any]]:
        """Every profile the proxy knows (name, rules, source, whether active)."""
        return list(self.call("GET", "/v1/profiles")["profiles"])

    def profile(self, name: str) -> dict[str, Any]:
        """One profile as the proxy holds it."""
        return dict(self.call("GET", f"/v1/profiles/{name}"))

    def upload(self, profile: dict[str, Any] | bytes, name: str | None = None) -> dict[str, Any]:
        """Add or replace a profile: a document (JSON) or YAML bytes (then `name` is required)."""
        if isinstance(profile, dict):
            return dict(self.call("PUT", f"/v1/profiles/{name or profile['metadata']['name']}", json=profile))
        if name is None:
            raise ValueError("uploading YAML bytes needs the profile's name")
        return dict(self.call("PUT", f"/v1/profiles/{name}", content=profile,
                              headers={"Content-Type": "application/yaml"}))

    def delete_profile(self, name: str) -> dict[str, Any]:
        """Remove a profile (the active one cannot be removed)."""
        return dict(self.call("DELETE", f"/v1/profiles/{name}"))

    # -- the active profile ---------------------------------------------------------------------------------
    def activate(self, profile: str | dict[str, Any], seed: int | None = None, ttl_seconds: float | None = None,
                 *, rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Activate a profile by name, or upload one given as a document (or as a name and its `rules`) and
        activate it."""
        if rules is not None:
            profile = profile_document(str(profile), rules)
        if isinstance(profile, dict):
            self.upload(profile)
            profile = str(profile["metadata"]["name"])
        body: dict[str, Any] = {"profile": profile}
        if seed is not None:
            body["seed"] = seed
        if ttl_seconds is not None:
            body["ttlSeconds"] = ttl_seconds
        return dict(self.call("PUT", "/v1/active", json=body))

    def deactivate(self) -> dict[str, Any]:
        """Back to pass-through; says what was active."""
        return dict(self.call("DELETE", "/v1/active"))

    def active(self) -> dict[str, Any]:
        """What is active, with its epoch, seed and TTL."""
        return dict(self.call("GET", "/v1/active"))

    # -- stats and the journal ------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Requests, injections, bind outcomes and connections, since the last reset."""
        return dict(self.call("GET", "/v1/stats"))

    def reset_stats(self) -> dict[str, Any]:
        """Zero the stats; the journal and the active profile stay."""
        return dict(self.call("POST", "/v1/stats/reset"))

    def journal(self, since: int = 0, limit: int = JOURNAL_PAGE) -> JournalPage:
        """One page of journal records after `since`."""
        page = self.call("GET", "/v1/journal", params={"since": since, "limit": limit})
        return JournalPage(list(page["records"]), int(page["next"]))

    def journal_after(self, since: int) -> JournalPage:
        """Every journal record after `since`, paging to the end."""
        records: list[dict[str, Any]] = []
        while True:
            page = self.journal(since)
            records += page.records
            if len(page.records) < JOURNAL_PAGE:
                return JournalPage(records, page.next)
            since = page.next

    def cursor(self) -> int:
        """The journal's end now: records written from here on come after it."""
        return self.journal_after(0).next

    def injections(self, since: int) -> list[dict[str, Any]]:
        """The injections the journal recorded after `since`."""
        return [r for r in self.journal_after(since).records if r["event"] == "inject"]

    # -- the rest -------------------------------------------------------------------------------------------
    def healthz(self) -> dict[str, Any]:
        """The proxy's health."""
        return dict(self.call("GET", "/healthz"))

    def cluster(self) -> dict[str, Any]:
        """The cluster source of profiles and activations (serve --profiles-from-cluster)."""
        return dict(self.call("GET", "/v1/cluster"))
