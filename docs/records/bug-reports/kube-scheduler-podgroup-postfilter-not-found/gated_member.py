"""Run from the checkout with its virtualenv: `.venv/bin/python <this file> v1.38.0-beta.0`.

Fault-free: a PodGroup (minCount 2) with one member ready and one behind a scheduling gate, on kube-scheduler
of a given release with GenericWorkload on. Prints the scheduler's log lines about the group and the pod's
PodScheduled condition, per release."""
import json
import sys
import time
from pathlib import Path

from kube_fault_proxy.kube.kubeapi import Pod, ensure_namespace
from kube_fault_proxy.rig.search.trial import Rig
from kube_fault_proxy.rig.workloads import gang

release = sys.argv[1]
state = Path(f"/tmp/pgpf/state-{release}")
out = {"release": release}
profiles = Path(__file__).resolve().parents[4] / "fault_profiles"
with Rig.running(state, "kube-scheduler", 2, profiles, kubernetes=release, gangs=True) as rig:
    kube = rig.cluster.admin_api()
    ns = "pgpf"
    with kube.client() as c:
        ensure_namespace(c, ns)
        c.create(gang.PodGroup.from_dict(gang.pod_group("g", ns, 2)))
        a = gang.member("g", 0, ns, "100m")
        b = gang.member("g", 1, ns, "100m")
        b["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
        c.create(Pod.from_dict(b))
        time.sleep(1)
        c.create(Pod.from_dict(a))
        time.sleep(8)
        for name in ("g-0", "g-1"):
            p = c.get(Pod, name, namespace=ns)
            conds = [x for x in (p["status"].get("conditions") or []) if x["type"] == "PodScheduled"]
            out[name] = {"nodeName": p["spec"].get("nodeName"), "PodScheduled": conds}
        pg = c.get(gang.PodGroup, "g", namespace=ns)
        out["podGroupConditions"] = (pg.get("status") or {}).get("conditions")
    log = (state / "logs" / "kube-scheduler.log").read_text()
    out["log"] = [line[:400] for line in log.splitlines() if "pgpf" in line][:20]
    out["notFoundErrors"] = sum(1 for line in log.splitlines() if "PodGroupPostFilter plugins: not found" in line)
print(json.dumps(out, indent=1))
