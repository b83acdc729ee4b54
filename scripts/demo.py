"""The demo: one fault profile, two real schedulers, on the local real control plane.

For kube-scheduler and then YuniKorn v1.9.0: start kube-apiserver + etcd + fake nodes, the
scheduler behind kube-fault-proxy with `bind-fail-first-attempt` active (every pod's first Binding
POST fails with 500), create pods, let it settle, touch every pod once (an informer update, as any
label change or relist would cause), and compare what the apiserver says with what the scheduler
booked.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from proxy.cluster import build
from proxy.cluster.control_plane import Cluster, Options, down, up
from proxy.cluster.kubeapi import Api

PROFILE = "bind-fail-first-attempt"


def pod(name: str, scheduler: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": scheduler, "containers": [{
                "name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def pod_view(api: Api) -> dict[str, dict[str, Any]]:
    items = api.get("/api/v1/namespaces/default/pods")["items"]
    return {p["metadata"]["name"]: {"node": p["spec"].get("nodeName"), "phase": p["status"].get("phase")}
            for p in items}


def run(scheduler: str, pods: int, nodes: int, settle: float, work: Path) -> dict[str, Any]:
    print(f"\n==> {scheduler}: local control plane, {nodes} nodes, the proxy in front with {PROFILE}")
    t0 = time.monotonic()
    c: Cluster = up(Options(state_dir=work / scheduler, nodes=nodes, scheduler=scheduler, proxy=True,
                            profile=PROFILE))
    api = c.admin_api()
    try:
        name = "default-scheduler" if scheduler == "kube-scheduler" else "yunikorn"
        for i in range(pods):
            api.create("/api/v1/namespaces/default/pods", pod(f"demo-{i:03d}", name))
        print(f"  created {pods} pods; settling {settle:.0f}s")
        time.sleep(settle)
        for p in pod_view(api):  # an informer update for every pod (any label change or relist does this)
            api.request("PATCH", f"/api/v1/namespaces/default/pods/{p}",
                        {"metadata": {"annotations": {"demo/touched": "1"}}},
                        content_type="application/merge-patch+json")
        time.sleep(5)
        view = pod_view(api)
        stats = httpx.get(f"{c.state['proxy']['control']}/v1/stats").json()
        result: dict[str, Any] = {
            "scheduler": scheduler,
            "bound": sum(1 for v in view.values() if v["node"]),
            "stranded": sum(1 for v in view.values() if not v["node"]),
            "failedBinds": stats["injectionsTotal"],
            "seconds": time.monotonic() - t0,
        }
        if scheduler == "yunikorn":
            base = c.state["yunikorn"]
            queue = httpx.get(f"{base}/ws/v1/partition/default/queue/root.default").json()
            apps = httpx.get(f"{base}/ws/v1/partition/default/applications/active").json()
            allocs = [a for app in apps for a in (app.get("allocations") or [])]
            by_uid = {p["metadata"]["uid"]: p for p in api.get("/api/v1/namespaces/default/pods")["items"]}
            result["queuePods"] = (queue.get("allocatedResource") or {}).get("pods", 0)
            result["phantoms"] = sum(1 for a in allocs
                                     if not by_uid.get(a["allocationKey"], {}).get("spec", {}).get("nodeName"))
        else:
            result["queuePods"] = result["phantoms"] = "-"
        return result
    finally:
        api.close()
        down(c.dir)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=60)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--settle", type=float, default=20.0)
    args = ap.parse_args()
    build.build_all(["etcd", "kube-apiserver", "kube-scheduler", "yunikorn-scheduler"])
    work = Path(tempfile.mkdtemp(prefix="kfp-demo-"))
    rows = [run(s, args.pods, args.nodes, args.settle, work) for s in ("kube-scheduler", "yunikorn")]
    print(f"\n==> {args.pods} pods, every pod's first Binding POST failed by kube-fault-proxy ({PROFILE})\n")
    print(f"{'scheduler':<16}{'failed binds':>13}{'bound':>7}{'stranded':>10}{'queue pods':>12}"
          f"{'phantom allocs':>16}")
    for r in rows:
        print(f"{r['scheduler']:<16}{r['failedBinds']:>13}{r['bound']:>7}{r['stranded']:>10}"
              f"{r['queuePods']!s:>12}{r['phantoms']!s:>16}")
    yk = rows[1]
    print("\nkube-scheduler retried every failed bind and bound every pod." if rows[0]["stranded"] == 0 else
          "\nkube-scheduler left pods unbound: see the logs above.")
    if yk["stranded"] and yk["phantoms"]:
        print(f"YuniKorn left {yk['stranded']} pods Pending with no node while its queue books "
              f"{yk['queuePods']} pods and holds {yk['phantoms']} allocations for unbound pods: YUNIKORN-3355.")
    print(f"(logs, kubeconfigs and journals: {work})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
