"""`ctl`: drive a running proxy's control plane."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx

from kube_fault_proxy.cli.exits import DEFAULT_CONTROL, FAILED, OK, USAGE
from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.proxy.schema.strict import parse_duration


def _print(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=False))


def run(args: argparse.Namespace) -> int:
    """One control-plane action; exit 2 when the proxy refuses the input, 1 when unreachable."""
    base = os.environ.get("KFP_CONTROL_URL", DEFAULT_CONTROL) if args.control == DEFAULT_CONTROL \
        else args.control
    token = args.token or os.environ.get("KFP_CONTROL_TOKEN")
    try:
        with ControlClient(base, token) as client:
            return _dispatch(client, args)
    except ControlError as e:
        print(f"kube-fault-proxy ctl: {e.status}: {e}", file=sys.stderr)
        return USAGE if e.status in (400, 404, 409, 413, 422) else FAILED
    except httpx.HTTPError as e:
        print(f"kube-fault-proxy ctl: cannot reach the control plane at {base}: {e}", file=sys.stderr)
        return FAILED


def _dispatch(client: ControlClient, args: argparse.Namespace) -> int:
    match args.ctl_command:
        case "activate":
            ttl_seconds = None
            if args.ttl:
                try:
                    ttl_seconds = parse_duration(args.ttl)
                except ValueError as e:
                    print(f"kube-fault-proxy ctl: --ttl: {e}", file=sys.stderr)
                    return USAGE
            got = client.activate(args.profile, args.seed, ttl_seconds)
            ttl = f", reverts in {got['ttlSeconds']:g}s" if got.get("ttlSeconds") else ""
            print(f"active: {got['profile']} (epoch {got['epoch']}, seed {got['seed']}{ttl})")
        case "deactivate":
            got = client.deactivate()
            print(f"pass-through (was: {got['deactivated'] or 'nothing'})")
        case "status":
            _print(client.active())
        case "stats":
            _print(client.reset_stats() if args.reset else client.stats())
        case "journal":
            for record in client.journal(args.since, args.limit).records:
                print(json.dumps(record, separators=(",", ":")))
        case "upload":
            from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_file

            for path in args.files:
                try:
                    name = load_file(path).name
                except ProfileError as e:
                    print(e, file=sys.stderr)
                    return USAGE
                got = client.upload(path.read_bytes(), name)
                print(f"{'replaced' if got['replaced'] else 'added'}: {name}")
        case "profiles":
            for p in client.profiles():
                mark = "*" if p["active"] else " "
                print(f"{mark} {p['name']:<32} {len(p['rules']):>2} rules  {p['source']}")
    return OK
