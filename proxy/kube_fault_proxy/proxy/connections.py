"""Connection counters: how many client and upstream connections the proxy accepted and opened."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ConnectionCounts:
    """Counted on connection events only (never per request); totals are never reset."""

    client_accepted: int = 0
    client_open: int = 0
    upstream_opened: int = 0
    upstream_open: int = 0
    upstream_failed: int = 0

    def client_connected(self) -> None:
        """A client connection was accepted."""
        self.client_accepted += 1
        self.client_open += 1

    def client_disconnected(self) -> None:
        """A client connection ended."""
        self.client_open = max(0, self.client_open - 1)

    def upstream_connected(self) -> None:
        """An upstream (apiserver) connection was established."""
        self.upstream_opened += 1
        self.upstream_open += 1

    def upstream_disconnected(self) -> None:
        """An established upstream connection ended."""
        self.upstream_open = max(0, self.upstream_open - 1)

    def upstream_connect_failed(self) -> None:
        """An upstream connect (TCP or TLS) failed."""
        self.upstream_failed += 1

    def as_dict(self) -> dict[str, int]:
        """JSON view for /v1/stats, /metrics and reports."""
        return {"clientAccepted": self.client_accepted, "clientOpen": self.client_open,
                "upstreamOpened": self.upstream_opened, "upstreamOpen": self.upstream_open,
                "upstreamConnectFailed": self.upstream_failed}
