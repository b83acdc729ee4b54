"""`serve`: the proxy and its control plane on one event loop, until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kube_fault_proxy import __version__, paths
from kube_fault_proxy.cli import logs
from kube_fault_proxy.cli.exits import FAILED, OK, USAGE
from kube_fault_proxy.private_files import PrivateFiles
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library, load_dir
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.proxy.runtime import Runtime, UnknownProfile
from kube_fault_proxy.proxy.schema.strict import parse_duration
from kube_fault_proxy.proxy.upstream import KubeconfigError, Upstream, read, upstream_from

if TYPE_CHECKING:
    from kube_fault_proxy.kube.kubeapi import Kube
    from kube_fault_proxy.proxy.crd.source import ClusterSource

SYNC_WAIT_SECONDS = 10.0  # serve says whether the cluster's objects are applied; it goes on either way


class UsageError(Exception):
    """Bad flags or input: exit 2 with this message."""


def split_hostport(value: str, flag: str) -> tuple[str, int]:
    """'127.0.0.1:7443' → ('127.0.0.1', 7443); '[::1]:7443' works too."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"{flag}: expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_upstream(args: argparse.Namespace, files: PrivateFiles) -> Upstream:
    """The upstream from --kubeconfig or --upstream and friends; its key material is kept in `files`."""
    if args.kubeconfig and args.upstream:
        raise UsageError("give either --kubeconfig or --upstream, not both")
    if args.kubeconfig:
        try:
            return upstream_from(read(args.kubeconfig, args.context), files.put)
        except KubeconfigError as e:
            raise UsageError(str(e)) from None
    if not args.upstream:
        raise UsageError("an upstream is needed: --kubeconfig FILE or --upstream URL")
    if not args.upstream.startswith("https://"):
        raise UsageError(f"--upstream: the apiserver URL must be https://, got {args.upstream!r}")
    for flag, path in (("--upstream-ca", args.upstream_ca), ("--client-cert", args.client_cert),
                       ("--client-key", args.client_key)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag}: no such file: {path}")
    if (args.client_cert is None) != (args.client_key is None):
        raise UsageError("--client-cert and --client-key go together")
    client_pem = None
    if args.client_cert is not None:
        pem = args.client_key.read_bytes() + b"\n" + args.client_cert.read_bytes()
        client_pem = files.put("upstream-client.pem", pem)
    return Upstream(args.upstream.rstrip("/"), args.upstream_ca, client_pem, args.insecure)


def parse_labels(text: str) -> dict[str, str]:
    """'pool=a,zone=b' → {'pool': 'a', 'zone': 'b'}; keys and values as Kubernetes labels."""
    from pydantic import TypeAdapter, ValidationError

    from kube_fault_proxy.proxy.crd.objects import LabelKey, LabelValue

    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--proxy-labels: expected KEY=VALUE, got {item!r}")
        labels[key] = value
    try:
        return TypeAdapter(dict[LabelKey, LabelValue]).validate_python(labels)
    except ValidationError as e:
        raise UsageError(f"--proxy-labels: not a Kubernetes label: {e.errors()[0]['msg']} "
                         f"({', '.join(map(str, e.errors()[0]['loc']))})") from None


def cluster_kube(args: argparse.Namespace) -> Kube:
    """The proxy's own client of the upstream (for --profiles-from-cluster): the kubeconfig's user, or
    --client-cert/--client-key; never through the proxy itself."""
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.config.models import Cluster, User

    from kube_fault_proxy.kube.kubeapi import ConfigError, Kube

    if args.kubeconfig:
        try:
            kube = Kube.from_kubeconfig(args.kubeconfig, args.context)
        except ConfigError as e:
            raise UsageError(str(e)) from None
        user = kube.config.user
        if user is None or not (user.token or user.token_file or user.client_cert or user.exec or user.auth_provider
                                or user.username):
            raise UsageError(f"--profiles-from-cluster: the user in {args.kubeconfig} has no credentials of "
                             "its own (the proxy lists and watches with them)")
        return kube
    if args.client_cert is None:
        raise UsageError("--profiles-from-cluster needs the proxy's own credentials: a --kubeconfig with a "
                         "user, or --client-cert and --client-key")
    cluster = Cluster(server=args.upstream, certificate_auth=str(args.upstream_ca) if args.upstream_ca else None,
                      insecure=args.insecure)
    config = KubeConfig.from_one(cluster=cluster, user=User(client_cert=str(args.client_cert),
                                                             client_key=str(args.client_key))).get()
    assert config is not None
    return Kube(config)


async def _serve(args: argparse.Namespace, library: Library, upstream: Upstream) -> int:
    """Start the proxy, then the control plane, then (optionally) the cluster source; run until a signal or the
    proxy's end; stop them in reverse order, however far startup got."""
    from kube_fault_proxy.proxy.control.app import build_app
    from kube_fault_proxy.proxy.control.parsing import ProcessParser
    from kube_fault_proxy.proxy.control.server import ControlServer
    from kube_fault_proxy.proxy.mitm import patches
    from kube_fault_proxy.proxy.mitm import server as mitm_server

    listen_host, listen_port = split_hostport(args.listen, "--listen")
    control_host, control_port = split_hostport(args.control, "--control")
    token = _control_token(args, control_host)
    loop = asyncio.get_running_loop()
    # SIGINT/SIGTERM stop serve from here on: one that comes during startup (after the ready file, during the heap
    # freeze) ends it cleanly once startup is done, instead of killing it with the signal's default action.
    stop = _stop_on_signals(loop)
    journal_path = args.journal or paths.default_journal()
    async with contextlib.AsyncExitStack() as stack:
        journal = Journal(journal_path, time.time)
        stack.callback(journal.close)
        running = stack.enter_context(_stop_recorded(journal))  # proxy-stop, once startup is complete
        runtime = Runtime(library, journal, time.monotonic, time.time,
                          schedule=lambda delay, fn: loop.call_later(delay, fn), scheduler_build=args.scheduler_build)
        proxy = await mitm_server.start(mitm_server.ProxySettings(
            upstream=upstream, listen_host=listen_host, listen_port=listen_port,
            confdir=args.confdir or paths.ca_dir(), max_concurrent_streams=args.max_concurrent_streams,
            read_header_timeout=args.read_header_timeout, idle_timeout=args.idle_timeout,
            stock_mitmproxy=args.stock_mitmproxy), runtime)
        stack.push_async_callback(proxy.stop)
        info = {"proxyUrl": proxy.url, "caFile": str(proxy.ca_cert), "upstream": upstream.url,
                "journal": str(journal_path), "libraryChanges": [o.as_dict() for o in patches.outcomes()]}
        parser = ProcessParser()  # uploads are parsed in a child process, started at the first one
        stack.callback(parser.close)
        source = _make_source(args, runtime) if args.profiles_from_cluster else None
        control = ControlServer(build_app(runtime, info, token, parser, cluster=source), control_host, control_port)
        await control.start()
        stack.push_async_callback(control.stop)
        chost = f"[{control_host}]" if ":" in control_host else control_host
        control_url = f"http://{chost}:{control.port}"
        _record_start(journal, args, library, proxy.url, upstream.url,
                      {o.name: o.applied for o in patches.outcomes()})
        _activate_at_startup(args, runtime)
        running["complete"] = True
        _announce(args, runtime, library, proxy.url, str(proxy.ca_cert), upstream.url, control_url, journal_path)
        ready: dict[str, object] = {**info, "controlUrl": control_url, "pid": os.getpid()}
        if source is not None:
            await _start_source(args, source)
            stack.push_async_callback(source.stop)
            ready["cluster"] = {"namespace": source.namespace, "proxyName": source.identity.name}
        if args.ready_file:
            paths.write_private(args.ready_file, json.dumps(ready))  # 0600, like the journal
        _freeze_startup_objects()
        await _until_stopped(stop, proxy.task)
        print("kube-fault-proxy: shutting down", flush=True)
    return OK


def _freeze_startup_objects() -> None:
    """Leave what startup built (modules, the apps, the profile library: ~all of the heap) out of the cyclic
    garbage collector's scans from now on. Its full collections scanned all of it: 13 in a 44,000-request
    run, ~100 ms of CPU each, 3.6 % of the proxy's CPU, each a pause of the event loop."""
    gc.collect()
    gc.freeze()


def _control_token(args: argparse.Namespace, control_host: str) -> str | None:
    """The control plane's bearer token; required when it listens beyond loopback."""
    token: str | None = args.control_token or os.environ.get("KFP_CONTROL_TOKEN") or None
    if not is_loopback(control_host) and token is None:
        raise UsageError(
            f"--control {args.control} is reachable from the network: set --control-token "
            "(or KFP_CONTROL_TOKEN)"
        )
    return token


@contextlib.contextmanager
def _stop_recorded(journal: Journal) -> Iterator[dict[str, bool]]:
    """Journal `proxy-stop` on the way out, once startup has completed (a refused start records no stop)."""
    state = {"complete": False}
    try:
        yield state
    finally:
        if state["complete"]:
            journal.append("proxy-stop")


def _record_start(journal: Journal, args: argparse.Namespace, library: Library, proxy_url: str,
                  upstream_url: str, library_changes: dict[str, bool]) -> None:
    repaired = {"journalTornBytesCut": journal.torn_bytes} if journal.torn_bytes else {}
    build = {"schedulerBuild": args.scheduler_build} if args.scheduler_build else {}
    journal.append("proxy-start", version=__version__, proxyUrl=proxy_url, upstream=upstream_url,
                   profiles=library.names(), **repaired, **build,
                   libraryChanges=library_changes)


def _activate_at_startup(args: argparse.Namespace, runtime: Runtime) -> None:
    """`--profile NAME [--seed N]`: active from the first request."""
    if args.profile:
        try:
            runtime.activations.activate(args.profile, args.seed, source="startup")
        except UnknownProfile:
            raise UsageError(f"--profile: no profile named {args.profile!r} in {args.profiles}") from None


def _announce(args: argparse.Namespace, runtime: Runtime, library: Library, proxy_url: str, ca_cert: str,
              upstream_url: str, control_url: str, journal_path: Path) -> None:
    active = runtime.activations.active.engine.profile.name if runtime.activations.active else "none (pass-through)"
    print(f"kube-fault-proxy {__version__} ready\n"
          f"  proxy:    {proxy_url}  ->  {upstream_url}\n"
          f"  trust CA: {ca_cert}\n"
          f"  control:  {control_url}  (API docs: {control_url}/docs)\n"
          f"  journal:  {journal_path}\n"
          f"  profiles: {len(library)} from {args.profiles}; active: {active}", flush=True)


def _stop_on_signals(loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    """An event SIGINT and SIGTERM set (the loop's handlers replace the default actions at once)."""
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _until_stopped(stop: asyncio.Event, proxy_task: Awaitable[object]) -> None:
    """Until SIGINT or SIGTERM (now or during startup), or the proxy's own end."""
    await asyncio.wait([asyncio.ensure_future(stop.wait()), asyncio.ensure_future(proxy_task)],
                       return_when=asyncio.FIRST_COMPLETED)


def _make_source(args: argparse.Namespace, runtime: Runtime) -> ClusterSource:
    from kube_fault_proxy.proxy.crd.reconciler import ProxyIdentity
    from kube_fault_proxy.proxy.crd.source import ClusterSource

    identity = ProxyIdentity(args.proxy_name or socket.gethostname(), args.proxy_labels)
    return ClusterSource(args.kube, runtime, identity, args.namespace, args.status_interval)


async def _start_source(args: argparse.Namespace, source: ClusterSource) -> None:
    """Start watching the cluster's FaultProfiles and FaultActivations; wait (a little) for the first sync."""
    identity = source.identity
    await source.start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(source.synced.wait(), SYNC_WAIT_SECONDS)
    labels = ",".join(f"{k}={v}" for k, v in identity.labels.items()) or "no labels"
    state = "synced" if source.synced.is_set() else f"not synced yet ({source.last_error or 'waiting'})"
    print(f"  cluster:  FaultProfiles and FaultActivations in {args.namespace} from {args.kube.server}, "
          f"as proxy {identity.name} ({labels}); {state}", flush=True)


def run(args: argparse.Namespace) -> int:
    """Validate everything first, then serve; bad input changes nothing and exits 2."""
    code = _run(args)
    if "mitmproxy_rs" in sys.modules:
        # mitmproxy_rs runs native threads that may still ask for the interpreter lock while Python
        # finalizes; Python 3.12 then ends such a thread with pthread_exit, whose unwinding through
        # Rust frames crashes the process (SIGSEGV, about one shutdown in ten, seen in gdb). By now
        # the journal is closed, the parser child stopped and the key files gone: exit without
        # finalizing.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(args: argparse.Namespace) -> int:
    logs.configure(args.verbose)
    if not 1 <= args.max_concurrent_streams <= 2**31 - 1:
        print(f"kube-fault-proxy serve: --max-concurrent-streams must be 1..{2**31 - 1}, "
              f"got {args.max_concurrent_streams}", file=sys.stderr)
        return USAGE
    for flag in ("read_header_timeout", "idle_timeout", "status_interval"):
        try:
            setattr(args, flag, parse_duration(getattr(args, flag)))
        except ValueError as e:
            print(f"kube-fault-proxy serve: --{flag.replace('_', '-')}: {e}", file=sys.stderr)
            return USAGE
    files = PrivateFiles()  # the upstream CA and client key: in memory, gone even on kill -9
    try:
        try:
            library = Library(load_dir(args.profiles))
        except ProfileError as e:
            print(e, file=sys.stderr)
            return USAGE
        upstream = resolve_upstream(args, files)
        if args.profiles_from_cluster:
            args.proxy_labels = parse_labels(args.proxy_labels)
            args.kube = cluster_kube(args)
        return asyncio.run(_serve(args, library, upstream))
    except UsageError as e:
        print(f"kube-fault-proxy serve: {e}", file=sys.stderr)
        return USAGE
    except OSError as e:
        print(f"kube-fault-proxy serve: {e}", file=sys.stderr)
        return FAILED
    finally:
        files.close()
        kube = getattr(args, "kube", None)
        if kube is not None and kube.files is not None:
            kube.files.close()
