"""DRA double allocation after a committed-but-failed claim status write: N runs faulted, N runs clean, per release."""
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml
from kube_fault_proxy.kube.kubeapi import delete_namespace
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster import controller_manager
from kube_fault_proxy.rig.cluster.control_plane import Options, running
from kube_fault_proxy.rig.invariants import check
from kube_fault_proxy.rig.workloads import dra

release, runs, pods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nodes = int(sys.argv[5]) if len(sys.argv) > 5 else 2
gates = {}
if len(sys.argv) > 4 and sys.argv[4] == "async":  # "sync" for none
    gates = {"kube-scheduler": {"SchedulerAsyncAPICalls": True}}
KFP = "/work/main/.venv/bin/kube-fault-proxy"
PROFILE = os.environ.get("PROFILE", "/work/dra-exp/claim-commit-then-fail.yaml")
profile = yaml.safe_load(Path(PROFILE).read_text())
base = profile["metadata"]["name"]
out = Path(f"/work/dra-exp/{Path(PROFILE).stem}-{release}{'-async' if gates else ''}-{nodes}n")
out.mkdir(parents=True, exist_ok=True)
opts = Options(state_dir=Path(f"/tmp/dra-exp-{release}-{nodes}"), nodes=nodes, scheduler="kube-scheduler", proxy=True,
               profiles_dir=Path("/work/main/fault_profiles"), kubernetes=release, feature_gates=gates,
               controllers=(*controller_manager.CONTROLLERS, *dra.CONTROLLERS))
results = []
with running(opts) as c:
    kubeconfig = str(c.kubeconfig("admin"))
    for faulted in (True, False):
        for i in range(runs):
            ns = f"dra-{'f' if faulted else 'c'}{i}-{uuid.uuid4().hex[:4]}"
            with ControlClient(c.control_url) as control:
                since = control.cursor()
                if faulted:
                    profile["metadata"]["name"] = f"{base}-{i}"
                    control.activate(profile)
                t0 = time.time()
                load = subprocess.run([KFP, "load", "dra", "--kubeconfig", kubeconfig, "--count", str(pods),
                                       "--namespace", ns, "--seed", str(i), "--rate", "50"],
                                      capture_output=True, text=True, timeout=300)
                api = c.admin_api()
                with api.client() as client:
                    snap, quiet = check.wait_quiet(lambda: check.fetch(client, None), 5.0, 90.0,
                                                   done=check.all_bound(ns))
                pending = sum(1 for p in snap.pods if p["metadata"].get("namespace") == ns
                              and not p["spec"].get("nodeName"))
                injected = len([r for r in control.injections(since)])
                control.deactivate()
            time.sleep(2)
            report = out / f"{ns}-check.json"
            judged = subprocess.run([KFP, "check", "--kubeconfig", kubeconfig, "--namespace", ns, "-o", str(report)],
                                    capture_output=True, text=True, timeout=120)
            try:
                doc = json.loads(report.read_text())
            except (ValueError, OSError):
                doc = {"raw": judged.stdout[-2000:], "err": judged.stderr[-2000:]}
            twice = [v for v in doc.get("violations", []) if v.get("invariant") == "device-allocated-once"]
            row = {"release": release, "faulted": faulted, "run": i, "namespace": ns, "loadRc": load.returncode,
                   "injections": injected, "pending": pending, "checkRc": judged.returncode,
                   "doubleAllocated": len(twice),
                   "broken": sorted({v.get("invariant") for v in doc.get("violations", [])}),
                   "example": twice[0]["message"] if twice else None, "seconds": round(time.time() - t0, 1)}
            print(json.dumps(row), flush=True)
            with c.admin_api().client() as client:  # its pods and claims go, and their devices with them
                delete_namespace(client, ns)
            results.append(row)
(out / "results.json").write_text(json.dumps(results, indent=1))
