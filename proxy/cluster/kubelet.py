"""A kubelet stand-in: marks every bound, Pending pod Running (no containers run).

YuniKorn drops a pod's assumed state only once the pod runs, so a control plane without kubelets
needs this. Run: python -m proxy.cluster.kubelet --server URL --token-file FILE --ca FILE
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import signal
import sys
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, operators
from lightkube.types import PatchType

from proxy.cluster.informer import Informer
from proxy.cluster.kubeapi import ApiError, HTTPError, Kube, Pod

FIELDS = {"spec.nodeName": operators.not_equal(""), "status.phase": "Pending"}


def running_patch() -> dict[str, Any]:
    """The status a kubelet would report for a started pod."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": t, "status": "True", "lastTransitionTime": now}
                  for t in ("Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers")]
    return {"status": {"phase": "Running", "startTime": now, "hostIP": "127.0.0.1", "conditions": conditions}}


class StandIn:
    """An informer on bound Pending pods; each one's status is patched to Running."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.started = 0
        self.informer = Informer(client, Pod, namespace="*", fields=FIELDS, on_change=self.seen)

    async def seen(self, kind: str, pod: dict[str, Any]) -> None:
        """ADDED or MODIFIED while Pending (a pod that leaves the selection arrives as DELETED)."""
        if kind in ("ADDED", "MODIFIED") and pod.get("status", {}).get("phase") == "Pending":
            await self.start_pod(pod)

    async def start_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            await self.client.patch(Pod.Status, meta["name"], running_patch(), namespace=meta["namespace"],
                                    patch_type=PatchType.STRATEGIC)
            self.started += 1
        except ApiError as e:
            if e.status.code != 404:  # deleted meanwhile: nothing to start
                print(f"kubelet stand-in: {meta['namespace']}/{meta['name']}: {e}", file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--server", required=True)
    p.add_argument("--token-file", type=Path, required=True, help="a file holding the bearer token (never argv)")
    p.add_argument("--ca", required=True)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(serve(Kube.from_token(args.server, args.token_file.read_text().strip(), Path(args.ca))))
    return 0


async def serve(kube: Kube) -> None:
    """Run the informer for ever; an error it cannot handle itself means a fresh start a second later."""
    stand_in = StandIn(kube.async_client())
    print("kubelet stand-in: watching bound pods", flush=True)
    while True:
        try:
            await stand_in.informer.run()
        except (HTTPError, KeyError) as e:
            print(f"kubelet stand-in: {type(e).__name__}: {e}; relisting", file=sys.stderr, flush=True)
            await asyncio.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())
