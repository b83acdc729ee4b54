"""`serve`: the proxy and its control plane on one event loop, until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import os
import signal
import sys
import time

from proxy import __version__, paths
from proxy.cli import logs
from proxy.cli.main import FAILED, OK, USAGE
from proxy.journal import Journal
from proxy.library import Library, load_dir
from proxy.private_files import PrivateFiles
from proxy.profile_loader import ProfileError
from proxy.runtime import Runtime, UnknownProfile
from proxy.strict import parse_duration
from proxy.upstream import KubeconfigError, Upstream, read, upstream_from


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


async def _serve(args: argparse.Namespace, library: Library, upstream: Upstream) -> int:
    from proxy.control.app import build_app
    from proxy.control.parsing import ProcessParser
    from proxy.control.server import ControlServer
    from proxy.mitm import server as mitm_server

    listen_host, listen_port = split_hostport(args.listen, "--listen")
    control_host, control_port = split_hostport(args.control, "--control")
    token = args.control_token or os.environ.get("KFP_CONTROL_TOKEN") or None
    if not is_loopback(control_host) and token is None:
        raise UsageError(
            f"--control {args.control} is reachable from the network: set --control-token "
            "(or KFP_CONTROL_TOKEN)"
        )
    loop = asyncio.get_running_loop()
    journal_path = args.journal or paths.default_journal()
    journal = Journal(journal_path, time.time)
    runtime = Runtime(library, journal, time.monotonic, time.time,
                      schedule=lambda delay, fn: loop.call_later(delay, fn), scheduler_build=args.scheduler_build)
    settings = mitm_server.ProxySettings(
        upstream=upstream, listen_host=listen_host, listen_port=listen_port,
        confdir=args.confdir or paths.ca_dir(), max_concurrent_streams=args.max_concurrent_streams,
        read_header_timeout=args.read_header_timeout, idle_timeout=args.idle_timeout,
    )
    proxy = await mitm_server.start(settings, runtime)
    info = {"proxyUrl": proxy.url, "caFile": str(proxy.ca_cert), "upstream": upstream.url,
            "journal": str(journal_path)}
    parser = ProcessParser()  # uploads are parsed in a child process, started at the first one
    control = ControlServer(build_app(runtime, info, token, parser), control_host, control_port)
    try:
        await control.start()
    except OSError:
        await proxy.stop()
        raise
    chost = f"[{control_host}]" if ":" in control_host else control_host
    control_url = f"http://{chost}:{control.port}"
    repaired = {"journalTornBytesCut": journal.torn_bytes} if journal.torn_bytes else {}
    build = {"schedulerBuild": args.scheduler_build} if args.scheduler_build else {}
    journal.append("proxy-start", version=__version__, proxyUrl=proxy.url, upstream=upstream.url,
                   profiles=library.names(), **repaired, **build)
    if args.profile:
        try:
            runtime.activate(args.profile, args.seed, source="startup")
        except UnknownProfile:
            await control.stop()
            parser.close()
            await proxy.stop()
            raise UsageError(f"--profile: no profile named {args.profile!r} in {args.profiles}") from None
    active = runtime.active.engine.profile.name if runtime.active else "none (pass-through)"
    print(f"kube-fault-proxy {__version__} ready\n"
          f"  proxy:    {proxy.url}  ->  {upstream.url}\n"
          f"  trust CA: {proxy.ca_cert}\n"
          f"  control:  {control_url}  (API docs: {control_url}/docs)\n"
          f"  journal:  {journal_path}\n"
          f"  profiles: {len(library)} from {args.profiles}; active: {active}", flush=True)
    if args.ready_file:
        args.ready_file.write_text(json.dumps({**info, "controlUrl": control_url, "pid": os.getpid()}))

    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    proxy_died = asyncio.ensure_future(proxy.task)
    await asyncio.wait([asyncio.ensure_future(stop.wait()), proxy_died],
                       return_when=asyncio.FIRST_COMPLETED)
    print("kube-fault-proxy: shutting down", flush=True)
    await control.stop()
    parser.close()
    await proxy.stop()
    journal.append("proxy-stop")
    journal.close()
    return OK


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
    for flag in ("read_header_timeout", "idle_timeout"):
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
        return asyncio.run(_serve(args, library, upstream))
    except UsageError as e:
        print(f"kube-fault-proxy serve: {e}", file=sys.stderr)
        return USAGE
    except OSError as e:
        print(f"kube-fault-proxy serve: {e}", file=sys.stderr)
        return FAILED
    finally:
        files.close()
