"""A kubelet stand-in: marks every bound, Pending pod Running (no containers run).

YuniKorn drops a pod's assumed state only once the pod runs, so a control plane without kubelets
needs this. Run: python -m proxy.cluster.kubelet --server URL --token-file FILE --ca FILE
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from proxy.cluster.kubeapi import Api, ApiError

SELECTOR = "spec.nodeName!=,status.phase=Pending"


def running_patch() -> dict[str, Any]:
    """The status a kubelet would report for a started pod."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": t, "status": "True", "lastTransitionTime": now}
                  for t in ("Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers")]
    return {"status": {"phase": "Running", "startTime": now, "hostIP": "127.0.0.1", "conditions": conditions}}


class StandIn:
    """List, then watch, bound Pending pods; patch each one's status to Running."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.started = 0

    def start_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        try:
            self.api.request("PATCH", path, running_patch(), content_type="application/strategic-merge-patch+json")
            self.started += 1
        except ApiError as e:
            if e.status != 404:  # deleted meanwhile: nothing to start
                print(f"kubelet stand-in: {meta['namespace']}/{meta['name']}: {e}", file=sys.stderr, flush=True)

    def run_once(self) -> None:
        """One list, then one watch until it ends."""
        listing = self.api.get("/api/v1/pods", fieldSelector=SELECTOR)
        for pod in listing["items"]:
            self.start_pod(pod)
        rv = listing["metadata"]["resourceVersion"]
        params = {"watch": "1", "fieldSelector": SELECTOR, "resourceVersion": rv, "timeoutSeconds": "120",
                  "allowWatchBookmarks": "true"}
        with self.api.client.stream("GET", "/api/v1/pods", params=params, timeout=None) as stream:
            for line in stream.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return
                pod = event["object"]
                if event["type"] in ("ADDED", "MODIFIED") and pod.get("status", {}).get("phase") == "Pending":
                    self.start_pod(pod)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--server", required=True)
    p.add_argument("--token-file", type=Path, required=True, help="a file holding the bearer token (never argv)")
    p.add_argument("--ca", required=True)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    api = Api(args.server, args.token_file.read_text().strip(), args.ca)
    stand_in = StandIn(api)
    print("kubelet stand-in: watching bound pods", flush=True)
    while True:
        try:
            stand_in.run_once()
        except (httpx.HTTPError, ApiError, KeyError, json.JSONDecodeError) as e:
            print(f"kubelet stand-in: {type(e).__name__}: {e}; relisting", file=sys.stderr, flush=True)
            time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())
