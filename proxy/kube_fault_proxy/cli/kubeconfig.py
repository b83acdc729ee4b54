"""`kubeconfig`: derive a kubeconfig that points at the proxy and trusts its CA."""

from __future__ import annotations

import argparse
import sys

import yaml

from kube_fault_proxy import paths
from kube_fault_proxy.cli.exits import OK, USAGE
from kube_fault_proxy.proxy.upstream import KubeconfigError, proxied, read


def run(args: argparse.Namespace) -> int:
    """Write the proxied kubeconfig."""
    try:
        view = read(args.kubeconfig, args.context)
    except KubeconfigError as e:
        print(e, file=sys.stderr)
        return USAGE
    if args.ca is None:
        from kube_fault_proxy.proxy.mitm.certs import ensure_ca

        ca_path = ensure_ca(paths.ca_dir())
    else:
        ca_path = args.ca
    try:
        ca = ca_path.read_bytes()
    except OSError as e:
        print(f"{ca_path}: cannot read the proxy CA: {e}", file=sys.stderr)
        return USAGE
    doc = proxied(view, args.proxy_url, ca)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    paths.write_private(args.output, yaml.safe_dump(doc, sort_keys=False))  # it may hold a token
    print(f"wrote {args.output}: {view.context} via {args.proxy_url} (trusting {ca_path})")
    return OK
