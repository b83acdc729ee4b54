"""The workload controllers: `check` on hand-made objects, and kube-controller-manager through the proxy as the
system under test, every workload kind converging with every promise kept."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.controllers import workloads
from kube_fault_proxy.rig.controllers.apiserver import RESOURCES, Recorder, snapshot
from kube_fault_proxy.rig.controllers.promises import check_world, judge, unconverged
from kube_fault_proxy.rig.invariants.pod_scheduled import check_scheduled
from kube_fault_proxy.rig.invariants.pod_waits import check_waits
from lightkube import Client
from lightkube.types import PatchType

from tests.support.cluster import api_client, make_namespace, start_cluster, stop_cluster, wait_for
from tests.support.processes import ROOT
from tests.support.time_travel import relist_through_a_stale_watch_list


def _create(client: Client, namespace: str, manifest: dict[str, Any]) -> Any:
    return client.create(RESOURCES[manifest["kind"]].from_dict(manifest), namespace=namespace)


def _owned_pod(name: str, owner: Any, node: str) -> dict[str, Any]:
    pod: dict[str, Any] = workloads.template(name, "Never")
    pod["metadata"].update(name=name, ownerReferences=[{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": True}])
    pod["spec"]["nodeName"] = node  # no scheduler needed: KWOK runs it at once
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def test_check_judges_hand_made_workloads(kube_scheduler_cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """No replicaset, job or daemonset controller runs in this control plane (controller_manager.CONTROLLERS):
    the objects stay as made."""
    c = kube_scheduler_cluster
    make_namespace(api_client(c.kubeconfig("admin")), namespace)
    with c.admin_api().client() as client:
        rs = _create(client, namespace, workloads.replicaset("rs", 2))
        # What a ReplicaSet controller writes once it has synced generation 1 and counted 2 pods: a snapshot judges
        # a surplus only then (before it, a scale-down's surplus may linger).
        client.patch(RESOURCES["ReplicaSet"].Status, "rs", {"status": {"observedGeneration": 1, "replicas": 2}},
                     namespace=namespace, patch_type=PatchType.MERGE)
        job = _create(client, namespace, workloads.job("job", 2, 2))
        ds = _create(client, namespace, workloads.daemonset("ds"))
        for owner, count, node in ((rs, 3, "kfp-node-0001"), (job, 3, "kfp-node-0002"), (ds, 2, "kfp-node-0003")):
            for i in range(count):
                _create(client, namespace, _owned_pod(f"{owner['metadata']['name']}-{i}", owner, node))

        def settled() -> bool:  # KWOK runs every pod, and completes the Job's
            phases = {p["metadata"]["name"]: p["status"].get("phase") for p in client.list(RESOURCES["Pod"],
                                                                                            namespace=namespace)}
            return len(phases) == 8 and all(v == ("Succeeded" if k.startswith("job-") else "Running")
                                            for k, v in phases.items())

        wait_for("KWOK running the pods and completing the Job's", settled, timeout=30)
    out = tmp_path / "check.json"
    r = subprocess.run([sys.executable, "-m", "kube_fault_proxy", "check", "--kubeconfig", str(c.kubeconfig("admin")),
                        "--namespace", namespace, "--quiet", "1", "--grace", "0", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(out.read_text())
    broken = {v["invariant"]: v for v in report["violations"]}
    assert sorted(broken) == ["daemonset-one-pod-per-node", "job-never-over-completions",
                              "replicaset-never-over-replicas"], report["violations"]
    assert broken["replicaset-never-over-replicas"]["numbers"] == {"live": 3, "replicas": 2}
    assert broken["job-never-over-completions"]["numbers"] == {"succeeded": 3, "completions": 2}
    assert broken["daemonset-one-pod-per-node"]["node"] == "kfp-node-0003"
    assert report["counts"]["workloads"] == 3 and report["invariants"]["daemonset-one-pod-per-node"]["violations"] == 1
    assert "replicaset-never-over-replicas" in r.stdout


@pytest.fixture(scope="module")
def controllers_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """3 KWOK nodes; kube-controller-manager with its workload controllers and kube-scheduler with asynchronous API
    calls, both through the proxy."""
    c = start_cluster(tmp_path_factory.mktemp("kcm-cluster"), "--nodes", "3", "--scheduler", "kube-scheduler",
                      "--workload-controllers", "--through-proxy", "kube-controller-manager",
                      "--through-proxy", "kube-scheduler", "--feature-gates", "kube-scheduler:SchedulerAsyncAPICalls=true")
    yield c
    stop_cluster(c)


def test_every_workload_kind_through_the_proxy_converges_with_every_promise_kept(controllers_cluster: Cluster) -> None:
    c = controllers_cluster
    assert c.through_proxy == ("kube-controller-manager", "kube-scheduler")
    assert c.targets["kube-scheduler"].endswith(" SchedulerAsyncAPICalls=true")
    assert c.scheduler_build == c.targets["kube-scheduler"]
    cmdline = Path(f"/proc/{c.processes['kube-scheduler'].pid}/cmdline").read_bytes().split(b"\0")
    assert b"--feature-gates=SchedulerAsyncAPICalls=true" in cmdline
    ns = f"w-{uuid.uuid4().hex[:6]}"
    make_namespace(api_client(c.kubeconfig("admin")), ns)
    kube = c.admin_api()
    t0 = time.monotonic()
    with Recorder(kube, [ns]) as recorder, kube.client() as client:
        def settle(what: str) -> None:
            wait_for(what, lambda: not unconverged(snapshot(client, [ns]), [ns]), timeout=45, interval=0.5)

        for manifest in (workloads.deployment("web", 3), workloads.replicaset("rs", 2), workloads.job("batch", 4, 2),
                         workloads.job("indexed", 3, 3, indexed=True), workloads.statefulset("db", 3),
                         workloads.daemonset("agent")):
            _create(client, ns, manifest)
        settle("every workload created converged")
        client.patch(RESOURCES["Deployment"], "web", {"spec": {"template": {"metadata": {"annotations": {
            "rollout": "2"}}}}}, namespace=ns)  # a rolling update: a second ReplicaSet
        client.patch(RESOURCES["ReplicaSet"], "rs", {"spec": {"replicas": 4}}, namespace=ns)
        client.patch(RESOURCES["StatefulSet"], "db", {"spec": {"replicas": 1}}, namespace=ns)
        settle("the rollout, the scale-up and the scale-down converged")
        client.patch(RESOURCES["ReplicaSet"], "rs", {"spec": {"replicas": 1}}, namespace=ns)
        client.delete(RESOURCES["Pod"], "db-0", namespace=ns)  # the StatefulSet makes it again
        time.sleep(1)
        settle("the second scale-down and the StatefulSet's pod converged")
        world = snapshot(client, [ns])
    history = recorder.history
    assert judge(history, faults_end=history.start, bound=60) == []
    assert check_world(world, [ns]) == []
    bound = [p for p in world.objects["Pod"].values() if p["spec"].get("nodeName")]
    assert len(bound) >= 10 and check_scheduled(bound, {"default-scheduler"}) == []  # asynchronous binds, clean
    assert check_waits(history, {"default-scheduler"}, faults_end=history.start) == []  # and none of them late
    kinds = {ch.kind for ch in history.changes}
    assert kinds == {"Pod", "ReplicaSet", "Deployment", "Job", "StatefulSet", "DaemonSet", "Node"}
    assert len(world.replicasets_of(next(iter(world.objects["Deployment"])))) == 2  # the rollout made its second
    with ControlClient(c.control_url) as control:
        seen = control.stats()["requestsByResource"]
    assert any(k.startswith("create") and "pods" in k for k in seen), seen  # the controllers' pods, through the proxy
    assert any("binding" in k for k in seen), seen  # and the scheduler's Bindings
    took = time.monotonic() - t0
    assert took < 90, f"the workloads took {took:.0f}s"


def test_kube_controller_managers_pod_informer_relists_through_a_stale_watch_list(controllers_cluster: Cluster) -> None:
    """kube-controller-manager v1.36.3's shared pod informer relists through a WatchList after its resumed watch
    expires: the stale rule serves it 2 pod writes back, and a ReplicaSet made afterwards still converges. Last
    in the module: the workloads test before it does not inherit the replayed view."""
    c = controllers_cluster
    [served], expired, _ = relist_through_a_stale_watch_list(c, "kube-controller-manager/*")
    print(f"kube-controller-manager: resumed watch expired first: {expired}")
    assert served["request"]["userAgent"].startswith("kube-controller-manager/")
    assert served["request"]["sendInitialEvents"] is True
    assert (served["servedAs"], served["writesSince"]) == ("watchlist", 2)
    assert int(served["servedResourceVersion"]) < int(served["newestResourceVersion"]) and served["pages"] >= 1
    ns = f"w-{uuid.uuid4().hex[:6]}"
    make_namespace(api_client(c.kubeconfig("admin")), ns)
    kube = c.admin_api()
    with kube.client() as client:
        _create(client, ns, workloads.replicaset("after", 2))
        wait_for("the ReplicaSet made after the replay converged",
                 lambda: not unconverged(snapshot(client, [ns]), [ns]), timeout=45, interval=0.5)
