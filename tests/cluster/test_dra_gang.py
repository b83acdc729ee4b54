"""DRA and gang scheduling on the releases that ship them (v1.37.2, v1.38.0-beta.0): pods that claim devices of the
rig's fake driver bind through the proxy with no fault, and what DRA promises holds on the recorded history;
with binding conditions a pod waits until the rig, playing the driver, marks its devices ready; a gang binds all
or nothing, and the scheduler still schedules after it. One control plane per release (4 nodes) for every test.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.kube.kubeapi import Kube, Node, Pod, delete_namespace
from kube_fault_proxy.rig.cluster import build, controller_manager, feature_gates
from kube_fault_proxy.rig.cluster.control_plane import Options, running
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.controllers.apiserver import Recorder
from kube_fault_proxy.rig.invariants import devices, gangs
from kube_fault_proxy.rig.pytest_plugin import Faults, ProxyHandle
from kube_fault_proxy.rig.workloads import dra, gang, load
from kube_fault_proxy.rig.workloads.shapes import PodSpec
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parents[2]
NODES = 4
DRA_RESOURCES = {"Pod": Pod, "ResourceClaim": dra.ResourceClaim, "ResourceSlice": dra.ResourceSlice}
GANG_RESOURCES = {"Pod": Pod, "PodGroup": gang.PodGroup}

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", params=["v1.37.2", "v1.38.0-beta.0"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """kube-scheduler through the proxy, the resourceclaim-controller, and gang scheduling's gate, API and
    podgroup-protection-controller (without it a PodGroup's finalizer keeps its namespace from going)."""
    release = str(request.param)
    build.build_all(["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"],
                    overrides=build.components(release))
    opts = Options(state_dir=tmp_path_factory.mktemp(f"dra-{release}"), nodes=NODES, scheduler="kube-scheduler",
                   proxy=True, profiles_dir=ROOT / "fault_profiles", kubernetes=release,
                   controllers=controller_manager.CONTROLLERS + dra.CONTROLLERS + gang.CONTROLLERS,
                   feature_gates=feature_gates.collect(gang.GATES), runtime_config=(gang.RUNTIME_CONFIG,))
    with running(opts) as c:
        yield c


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace per test, deleted with everything in it afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    with cluster.admin_api().client() as client:
        delete_namespace(client, name)


def _bound(kube: Kube, namespace: str, want: int, timeout: float) -> list[dict[str, object]]:
    """The namespace's pods once `want` are bound (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    with kube.client() as client:
        while True:
            pods = list(client.list(Pod, namespace=namespace))
            if sum(1 for p in pods if p["spec"].get("nodeName")) >= want or time.monotonic() > deadline:
                return pods
            time.sleep(0.5)


def test_dra_pods_bind_through_the_proxy_and_keep_dras_promises(cluster: Cluster, namespace: str) -> None:
    kube = cluster.admin_api()
    faults = Faults(ProxyHandle(cluster.control_url), None)
    faults.reset()
    before = faults.stats()["bindsTotal"]["succeeded"]
    with Recorder(kube, [namespace], resources=DRA_RESOURCES) as recorder, \
            load.shaped(kube, "dra", 8, seed=5, namespace=namespace) as workload:
        assert workload is not None
        spec = load.LoadSpec(count=8, rate=50, concurrency=4, namespace=namespace, pods=workload.pods)
        assert load.create_pods(kube, spec, progress=False).created == 8
        assert load.wait_bound(kube, namespace, spec.run_id, 60) == 0
        time.sleep(1)  # the recorder sees the last bind
        with kube.client() as client:
            claims = list(client.list(dra.ResourceClaim, namespace=namespace))
            pods = list(client.list(Pod, namespace=namespace))
            slices = list(client.list(dra.ResourceSlice))
    assert faults.stats()["bindsTotal"]["succeeded"] - before == 8  # each Binding went through the proxy
    assert len(claims) == 8
    held = [r for c in claims for r in c["status"]["allocation"]["devices"]["results"]]
    assert sorted(len(c["status"]["allocation"]["devices"]["results"]) for c in claims) == \
        sorted(p.devices for p in workload.pods)
    assert {r["driver"] for r in held} == {dra.DRIVER} and len({(r["pool"], r["device"]) for r in held}) == len(held)
    assert devices.check_devices(pods, claims, slices, namespace) == []
    changes = {c.kind for c in recorder.history.changes}
    assert {"Pod", "ResourceClaim", "ResourceSlice"} <= changes
    assert devices.judge_devices(recorder.history) == []


def test_check_judges_dras_promises_on_the_cluster(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    kube = cluster.admin_api()
    with load.shaped(kube, "dra", 3, seed=1, namespace=namespace) as workload:
        assert workload is not None
        spec = load.LoadSpec(count=3, namespace=namespace, pods=workload.pods)
        load.create_pods(kube, spec, progress=False)
        assert load.wait_bound(kube, namespace, spec.run_id, 60) == 0
        out = tmp_path / "check.json"
        code = main(["check", "--kubeconfig", str(cluster.kubeconfig("admin")), "--namespace", namespace,
                     "--quiet", "1", "--wait", "30", "-o", str(out)])
    report = json.loads(out.read_text())
    assert code == 0, report
    assert {k: v["holds"] for k, v in report["invariants"].items() if k in devices.NAMES} == \
        dict.fromkeys(devices.NAMES, True)
    assert report["counts"]["claims"] >= 3


def test_binding_waits_until_the_driver_marks_the_devices_ready(cluster: Cluster, namespace: str) -> None:
    kube = cluster.admin_api()
    with kube.client() as client:
        nodes = dra.node_names(client)
        dra.publish(client, nodes, [2] * len(nodes), [namespace], binding_conditions=True)
    try:
        w = load.LoadSpec(count=1, namespace=namespace, pods=(PodSpec(100, 64, devices=2),))
        assert load.create_pods(kube, w, progress=False).created == 1
        assert load.wait_bound(kube, namespace, w.run_id, 8) == 1  # PreBind waits for Ready
        with kube.client() as client:
            [claim] = client.list(dra.ResourceClaim, namespace=namespace)
        assert claim["status"].get("allocation")  # allocated, in PreBind, not bound
        with dra.Driver(kube, [namespace]) as driver:
            assert load.wait_bound(kube, namespace, w.run_id, 60) == 0
        assert driver.written >= 1
    finally:
        with kube.client() as client:
            dra.unpublish(client)


def _cordon(kube: Kube, nodes: list[str], on: bool) -> None:
    with kube.client() as client:
        for name in nodes:
            client.patch(Node, name, {"spec": {"unschedulable": on or None}}, patch_type=PatchType.MERGE)


def test_a_gang_binds_all_or_nothing_and_the_scheduler_is_not_stuck(cluster: Cluster, namespace: str) -> None:
    kube = cluster.admin_api()
    with kube.client() as client:
        nodes = dra.node_names(client)
    # Each member needs most of a node (16 cpu): with one node schedulable only one fits, and minCount is 3.
    _cordon(kube, nodes[1:], True)
    try:
        with Recorder(kube, [namespace], resources=GANG_RESOURCES) as recorder:
            with kube.client() as client:
                gang.create_gang(client, namespace, "g", 3, 3, "10", interval=0.5)
            time.sleep(6)
            with kube.client() as client:
                assert gang.bound(client, namespace, "g") == 0  # nothing, not a part
            _cordon(kube, nodes[1:], False)  # capacity appears
            pods = _bound(kube, namespace, 3, 60)
            assert sum(1 for p in pods if p["spec"].get("nodeName")) == 3
            probe, seconds = gang.probe(kube, namespace, timeout=30)
    finally:
        _cordon(kube, nodes[1:], False)
    assert gangs.judge_gangs(recorder.history) == []
    assert gangs.not_stuck(f"{namespace}/{probe}", seconds, 30) == []
    # The same history, judged as if it had ended with two members bound past the timeout, is caught: the check
    # can fail on what this cluster recorded.
    partial = [c for c in recorder.history.ordered() if not (c.kind == "Pod" and c.obj["spec"].get("nodeName")
                                                           and c.obj["metadata"]["name"] == "g-2")]
    recorder.history.changes = partial
    recorder.history.end += gangs.PERMIT_TIMEOUT
    assert [v.invariant for v in gangs.judge_gangs(recorder.history)] == [gangs.ALL_OR_NOTHING]
