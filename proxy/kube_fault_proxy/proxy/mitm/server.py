"""Build and run a lean mitmproxy master in reverse mode, with only the addons the proxy needs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mitmproxy import master, options
from mitmproxy.addons import core, next_layer, proxyserver, tlsconfig

from kube_fault_proxy import paths
from kube_fault_proxy.proxy.mitm import listen, patches
from kube_fault_proxy.proxy.mitm.addon import FaultAddon
from kube_fault_proxy.proxy.mitm.alpn import PreferHttp2
from kube_fault_proxy.proxy.mitm.bind_commits import BindCommits
from kube_fault_proxy.proxy.mitm.binds import BindAccounting, BindOutcomes, BindReads
from kube_fault_proxy.proxy.mitm.connection_stalls import ConnectionStalls
from kube_fault_proxy.proxy.mitm.counting import ConnectionCounter
from kube_fault_proxy.proxy.mitm.crash_points import CrashPoints
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.mitm.in_flight import InFlightTracking, WritesInFlight
from kube_fault_proxy.proxy.mitm.late_commits import LateCommits
from kube_fault_proxy.proxy.mitm.links import UpstreamLoss
from kube_fault_proxy.proxy.mitm.outage import OutageController, OutageStarts, OutageState
from kube_fault_proxy.proxy.mitm.patches import internals, stream_limit
from kube_fault_proxy.proxy.mitm.stale_reads import StaleAnswers, StaleReads
from kube_fault_proxy.proxy.mitm.stream_settings import StreamSettings
from kube_fault_proxy.proxy.mitm.stream_stalls import StreamStalls
from kube_fault_proxy.proxy.mitm.timeouts import ConnectionTimeouts
from kube_fault_proxy.proxy.mitm.watch_edits import WatchEdits
from kube_fault_proxy.proxy.runtime import Runtime
from kube_fault_proxy.proxy.stale_views import StaleViews
from kube_fault_proxy.proxy.upstream import Upstream
from kube_fault_proxy.proxy.watch_signals import WatchSignals

log = logging.getLogger(__name__)
CA_CERT_FILE = "mitmproxy-ca-cert.pem"


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Where the proxy listens and where it keeps its CA."""

    upstream: Upstream
    listen_host: str = "127.0.0.1"
    listen_port: int = 7443
    confdir: Path = field(default_factory=paths.ca_dir)
    max_concurrent_streams: int = stream_limit.DEFAULT
    # kube-apiserver's own: Go's ReadHeaderTimeout 32 s and IdleTimeout 90 s (0 turns one off).
    read_header_timeout: float = 32.0
    idle_timeout: float = 90.0
    # mitmproxy, hyper-h2 and hpack as they ship: every change of mitm/patches skipped.
    stock_mitmproxy: bool = False


class _Ready:
    """Last in the chain: its `running` fires after every other addon is up."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


class RunningProxy:
    """A started master; stop() closes the listener and every live connection."""

    def __init__(self, m: master.Master, task: asyncio.Task[None], settings: ProxySettings) -> None:
        self.master = m
        self.task = task
        self.settings = settings

    @property
    def _server(self) -> Any:
        return self.master.addons.get("proxyserver")

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        return int(self._server.listen_addrs()[0][1])

    @property
    def url(self) -> str:
        """The URL a client uses to reach the proxy."""
        host = self.settings.listen_host
        host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        host = f"[{host}]" if ":" in host else host
        return f"https://{host}:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA certificate clients must trust."""
        return self.settings.confdir / CA_CERT_FILE

    def close_client_connections(self) -> int:
        """Close every live client connection; returns how many."""
        return sum(internals.close_client(h) for h in internals.handlers(self._server))

    async def stop(self) -> None:
        """Stop listening, drop live connections, end the master."""
        with contextlib.suppress(Exception):
            await internals.set_listeners(self._server, [])
        self.close_client_connections()
        self.master.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def _options(s: ProxySettings) -> options.Options:
    host = f"[{s.listen_host}]" if ":" in s.listen_host else s.listen_host
    s.confdir.mkdir(parents=True, exist_ok=True)
    return options.Options(
        mode=[f"reverse:{s.upstream.url}@{host}:{s.listen_port}"],
        confdir=str(s.confdir),
        ssl_verify_upstream_trusted_ca=str(s.upstream.ca_file) if s.upstream.ca_file else None,
        client_certs=str(s.upstream.client_pem) if s.upstream.client_pem else None,
        ssl_insecure=s.upstream.insecure,
        tcp_timeout=3600,
    )


def _stream_limits(settings: ProxySettings) -> list[object]:
    """The stream limit through hyper-h2's own settings, where the library change is not applied (else none)."""
    if patches.applied(stream_limit) or settings.max_concurrent_streams == stream_limit.H2_DEFAULT:
        return []
    log.info("kube-fault-proxy: the HTTP/2 stream limit %d is set by a SETTINGS frame at each connection's "
             "first request (the library change stream_limit is not applied)", settings.max_concurrent_streams)
    return [StreamSettings(settings.max_concurrent_streams)]


async def start(settings: ProxySettings, runtime: Runtime, *extra_addons: object) -> RunningProxy:
    """Start the proxy on the running loop and return once it listens."""
    stream_limit.check(settings.max_concurrent_streams)
    m = master.Master(_options(settings))
    # The library changes, each where its verified source is installed (before any addon is added).
    patches.install(patches.Target(m, settings.max_concurrent_streams), enabled=not settings.stock_mitmproxy)
    limits = _stream_limits(settings)
    ready = _Ready()
    binds = BindOutcomes(runtime.counters.bind_outcome)  # Bindings in flight, shared by the accounting's halves
    latency = runtime.counters.bind_latency  # each pod's first Binding POST to its commit (reads, commits, late)
    outage = OutageState(runtime, binds, in_flight := WritesInFlight())  # with the writes a cut fails in flight
    held, signals = HeldAnswers(), WatchSignals()  # answers faults hold; events held watches wait for (see below)
    stale = StaleViews(runtime.counters, runtime.clock, signals)  # the revision log: every answer, a late commit's too
    # One job per addon; mitmproxy runs a hook's addons in this order, awaiting each.
    m.addons.add(
        core.Core(),
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        PreferHttp2(),  # before TlsConfig, which reads the choice
        tlsconfig.TlsConfig(),
        ConnectionCounter(runtime.counters.connections),
        *limits,
        ConnectionTimeouts(runtime, settings.read_header_timeout, settings.idle_timeout),  # ends at the answer
        BindReads(binds, latency.attempt),  # in flight once read: before an outage drops it or a fault holds it
        OutageController(outage),  # drops what arrives during an outage, before any fault sees it
        UpstreamLoss(runtime, held),
        BindCommits(latency.committed),  # a Binding's 2xx from the apiserver, before a fault replaces or holds it
        StaleAnswers(stale),  # reads each answer into the revision log before a fault replaces or holds it
        FaultAddon(runtime, held, in_flight),  # parses, decides, carries the plain steps out, stamps the rest
        OutageStarts(outage),  # next: an outage a fault asked for begins in the same request hook
        WatchEdits(runtime.counters.note, signals, runtime.activations),  # streams an edited watch through its editor
        StreamStalls(runtime.counters.note, runtime.activations),  # silences a stalled watch, then ends it
        ConnectionStalls(runtime.counters.note, runtime.activations),  # holds a client connection silent both ways
        StaleReads(stale),  # serves a stale view; wraps every watch's stream (edited or not) with its scan
        LateCommits(runtime.counters, stale.answered_late, committed=latency.committed),  # later than its error
        CrashPoints(runtime.counters.note, held),  # holds a committed answer, before the bind accounting sees it
        BindAccounting(binds),  # after: a Binding's answer as the faults left it
        InFlightTracking(in_flight),  # last of the faults' chain: a write still live after every hook is forwarded
        *extra_addons,
        ready,
    )
    # lazy: the upstream connection opens at a client's first request, so clients that connect and
    # send nothing (idle, half-open, slowloris) never fan out to the apiserver.
    m.options.update(connection_strategy="lazy", stream_large_bodies="1m")
    task = asyncio.create_task(m.run(), name="mitmproxy-master")
    waiter = asyncio.create_task(ready.event.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()
        raise RuntimeError("the proxy stopped during startup (see the log above)")
    running = RunningProxy(m, task, settings)
    if not running._server.listen_addrs():
        await running.stop()
        raise OSError(
            f"could not listen on {settings.listen_host}:{settings.listen_port} (in use?)"
        )
    listen.widen(running._server)
    return running
