"""`ctl`: drive a running proxy's control plane."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx

from kube_fault_proxy.cli.exits import DEFAULT_CONTROL, FAILED, OK, USAGE
from kube_fault_proxy.proxy.profiles.strict import parse_duration


def _print(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=False))


def _call(client: httpx.Client, method: str, path: str, **kw: Any) -> Any:
    r = client.request(method, path, **kw)
    if r.status_code >= 400:
        try:
            body = r.json()
            message = body.get("message") or body.get("detail") or r.text
        except ValueError:
            message = r.text
        raise _Refused(r.status_code, str(message))
    return r.json()


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def run(args: argparse.Namespace) -> int:
    """One control-plane action; exit 2 when the proxy refuses the input, 1 when unreachable."""
    base = os.environ.get("KFP_CONTROL_URL", DEFAULT_CONTROL) if args.control == DEFAULT_CONTROL \
        else args.control
    token = args.token or os.environ.get("KFP_CONTROL_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=10.0) as client:
            return _dispatch(client, args)
    except _Refused as e:
        print(f"kube-fault-proxy ctl: {e.status}: {e}", file=sys.stderr)
        return USAGE if e.status in (400, 404, 409, 413, 422) else FAILED
    except httpx.HTTPError as e:
        print(f"kube-fault-proxy ctl: cannot reach the control plane at {base}: {e}", file=sys.stderr)
        return FAILED


def _dispatch(client: httpx.Client, args: argparse.Namespace) -> int:
    match args.ctl_command:
        case "activate":
            body: dict[str, Any] = {"profile": args.profile}
            if args.seed is not None:
                body["seed"] = args.seed
            if args.ttl:
                try:
                    body["ttlSeconds"] = parse_duration(args.ttl)
                except ValueError as e:
                    print(f"kube-fault-proxy ctl: --ttl: {e}", file=sys.stderr)
                    return USAGE
            got = _call(client, "PUT", "/v1/active", json=body)
            ttl = f", reverts in {got['ttlSeconds']:g}s" if got.get("ttlSeconds") else ""
            print(f"active: {got['profile']} (epoch {got['epoch']}, seed {got['seed']}{ttl})")
        case "deactivate":
            got = _call(client, "DELETE", "/v1/active")
            print(f"pass-through (was: {got['deactivated'] or 'nothing'})")
        case "status":
            _print(_call(client, "GET", "/v1/active"))
        case "stats":
            _print(_call(client, "POST" if args.reset else "GET",
                         "/v1/stats/reset" if args.reset else "/v1/stats"))
        case "journal":
            got = _call(client, "GET", "/v1/journal", params={"since": args.since, "limit": args.limit})
            for record in got["records"]:
                print(json.dumps(record, separators=(",", ":")))
        case "upload":
            from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_file

            for path in args.files:
                try:
                    name = load_file(path).name
                except ProfileError as e:
                    print(e, file=sys.stderr)
                    return USAGE
                got = _call(client, "PUT", f"/v1/profiles/{name}", content=path.read_bytes(),
                            headers={"Content-Type": "application/yaml"})
                print(f"{'replaced' if got['replaced'] else 'added'}: {name}")
        case "profiles":
            for p in _call(client, "GET", "/v1/profiles")["profiles"]:
                mark = "*" if p["active"] else " "
                print(f"{mark} {p['name']:<32} {len(p['rules']):>2} rules  {p['source']}")
    return OK
