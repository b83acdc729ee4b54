"""A bare HTTP/2 client over TLS (hyper-h2 on a blocking socket) that records when each byte and frame arrived:
what httpx hides (a PING's answer, a stream's end, a socket that got nothing at all) is what a stall test asserts."""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events


@dataclass
class Arrived:
    """One hyper-h2 event, and when (monotonic seconds) its bytes came."""

    at: float
    event: h2.events.Event


@dataclass
class RawH2:
    """One HTTP/2 connection; `pump` reads what has come, keeping every event with its time."""

    url: str
    ca_file: str
    sock: ssl.SSLSocket = field(init=False)
    conn: h2.connection.H2Connection = field(init=False)
    events: list[Arrived] = field(default_factory=list)
    byte_times: list[tuple[float, int]] = field(default_factory=list)  # (when, how many) per socket read
    closed_at: float | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection((parts.hostname, parts.port), timeout=5)
        self.sock = ctx.wrap_socket(raw, server_hostname=parts.hostname)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self._flush()
        self.authority = parts.netloc

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def get(self, path: str, token: str | None = None) -> int:
        """Open a stream with a GET (with a bearer token, if given); its id."""
        sid: int = self.conn.get_next_available_stream_id()
        auth = [("authorization", f"Bearer {token}")] if token else []
        self.conn.send_headers(sid, [(":method", "GET"), (":scheme", "https"), (":authority", self.authority),
                                     (":path", path), ("accept", "application/json"), *auth], end_stream=True)
        self._flush()
        return sid

    def post(self, path: str, body: bytes, flush: bool = True) -> int:
        """Open a stream with a JSON POST; its id. With `flush=False` its frames wait for the next `send`, so
        that many requests leave in one write (a burst the other side reads whole)."""
        sid: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "https"), (":authority", self.authority),
                                     (":path", path), ("content-type", "application/json"),
                                     ("content-length", str(len(body)))])
        self.conn.send_data(sid, body, end_stream=True)
        if flush:
            self._flush()
        return sid

    def send(self) -> None:
        """Write every frame queued so far, in one write."""
        self._flush()

    def status(self, sid: int) -> int | None:
        """The status of a stream's answer, if its headers came."""
        for a in self.of(sid):
            if isinstance(a.event, h2.events.ResponseReceived):
                return int(dict(a.event.headers)[b":status"])
        return None

    def ping(self, opaque: bytes) -> None:
        self.conn.ping(opaque)
        self._flush()

    def reset(self, sid: int) -> None:
        self.conn.reset_stream(sid)
        self._flush()

    def pump(self, seconds: float) -> None:
        """Read for this long (or until the connection closes), recording what comes."""
        deadline = time.monotonic() + seconds
        while self.closed_at is None and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return
            except (ssl.SSLError, OSError):
                self.closed_at = time.monotonic()
                return
            now = time.monotonic()
            if not data:
                self.closed_at = now
                return
            self.byte_times.append((now, len(data)))
            for event in self.conn.receive_data(data):
                self.events.append(Arrived(now, event))
            self._flush()  # window updates, settings acks

    def of(self, sid: int) -> list[Arrived]:
        """The events of one stream."""
        return [a for a in self.events if getattr(a.event, "stream_id", None) == sid]

    def data_times(self, sid: int) -> list[float]:
        """When each DATA frame with bytes in it came (an END_STREAM may ride on an empty one)."""
        return [a.at for a in self.of(sid) if isinstance(a.event, h2.events.DataReceived) and a.event.data]

    def ended_at(self, sid: int) -> float | None:
        return next((a.at for a in self.of(sid) if isinstance(a.event, h2.events.StreamEnded)), None)

    def reset_at(self, sid: int) -> float | None:
        return next((a.at for a in self.of(sid) if isinstance(a.event, h2.events.StreamReset)), None)

    def body(self, sid: int) -> bytes:
        return b"".join(a.event.data for a in self.of(sid) if isinstance(a.event, h2.events.DataReceived))

    def ping_acks(self) -> list[Arrived]:
        return [a for a in self.events if isinstance(a.event, h2.events.PingAckReceived)]

    def close(self) -> None:
        if self.closed_at is None:
            self.closed_at = time.monotonic()
        self.sock.close()
