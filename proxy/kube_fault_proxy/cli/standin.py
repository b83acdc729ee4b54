"""`stand-in`: serve the small HTTPS stand-in apiserver (kube_fault_proxy.rig.standin) until interrupted."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

from kube_fault_proxy.cli.exits import OK, USAGE
from kube_fault_proxy.rig.standin import default_dir, running, write_kubeconfig

WAKE_SECONDS = 0.5  # how often the main thread looks for a Ctrl-C while it serves


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `stand-in` subcommand."""
    p = sub.add_parser("stand-in", help="a small HTTPS apiserver (nodes, pods, Bindings) to try the proxy on a "
                                        "machine with no cluster")
    p.add_argument("--listen", default="127.0.0.1:6443", metavar="HOST:PORT",
                   help="where it listens (default 127.0.0.1:6443; port 0: any free port)")
    p.add_argument("--kubeconfig", type=Path, default=Path("stand-in.kubeconfig"), metavar="FILE",
                   help="the kubeconfig to write for it (default ./stand-in.kubeconfig)")
    p.add_argument("--dir", type=Path, default=None, metavar="DIR",
                   help=f"its certificates (default: {default_dir()})")
    p.add_argument("--nodes", type=int, default=3, help="Nodes it lists (default 3)")
    p.add_argument("--pods", type=int, default=10, help="Pending pods it starts with, pod-0 … (default 10)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request")


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; exit 2 on a bad --listen."""
    host, _, port = str(args.listen).rpartition(":")
    if not host or not port.isdigit():
        print(f"kube-fault-proxy stand-in: --listen: expected HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return USAGE
    stop = threading.Event()
    # Both set by hand: a process started in the background by a non-interactive shell inherits SIGINT ignored,
    # and Python then installs no KeyboardInterrupt for it (the CI rehearsals ran so, and Ctrl-C did nothing).
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with running((host, int(port)), args.dir or default_dir(), args.nodes, args.pods, args.verbose) as (_, url):
            write_kubeconfig(args.kubeconfig, url, (args.dir or default_dir()) / "pki")
            print(f"kube-fault-proxy stand-in ready\n"
                  f"  apiserver:  {url} ({args.nodes} nodes, {args.pods} pending pods in default)\n"
                  f"  kubeconfig: {args.kubeconfig}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                # Woken twice a second: Ctrl-C may land on the serving thread, and then nothing interrupts a wait
                # with no timeout on this one (the Python-level KeyboardInterrupt is raised on the main thread
                # only when it runs): the quick start's test once saw the stand-in still up 15 s after its SIGINT.
                while not stop.wait(WAKE_SECONDS):
                    pass
    except OSError as e:
        print(f"kube-fault-proxy stand-in: cannot listen on {args.listen}: {e}", file=sys.stderr)
        return USAGE
    return OK
