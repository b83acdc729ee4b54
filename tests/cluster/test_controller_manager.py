"""kube-controller-manager on the real control plane: namespaces, garbage collection, service accounts."""

from __future__ import annotations

import time
import uuid

from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes import client as k8s

from tests.support.cluster import all_running, api_client, create_pods, kubectl, make_namespace, pod_manifest, wait_for


def test_deleting_a_namespace_removes_its_pods(kube_scheduler_cluster: Cluster) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    ns = f"gone-{uuid.uuid4().hex[:6]}"
    make_namespace(api, ns)
    running = create_pods(api, ns, 30)  # bound and Running: their deletion is graceful (30 s), KWOK finishes it
    pending = create_pods(api, ns, 3, scheduler="nobody")  # never bound: deleted at once
    wait_for("30 pods Running", lambda: all_running(api, ns, running), timeout=120)
    phases = sorted(p.status.phase for p in api.list_namespaced_pod(ns).items)
    assert phases == ["Pending"] * len(pending) + ["Running"] * len(running)
    t0 = time.monotonic()
    kubectl(c, "admin", "delete", "namespace", ns, "--wait=true", "--timeout=120s")
    took = time.monotonic() - t0
    assert [ns_.metadata.name for ns_ in api.list_namespace().items if ns_.metadata.name == ns] == []
    assert api.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}").items == []
    assert took < 60, f"the namespace took {took:.0f}s to go"


def test_the_garbage_collector_deletes_what_an_object_owned(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    owner = api.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    pod = pod_manifest("owned")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                           "uid": owner.metadata.uid}]
    api.create_namespaced_pod(namespace, pod)
    wait_for("the owned pod Running", lambda: all_running(api, namespace, ["owned"]), timeout=60)
    api.delete_namespaced_config_map("owner", namespace)
    wait_for("the owned pod collected", lambda: not api.list_namespaced_pod(namespace).items, timeout=60)


def test_pods_get_their_service_account_and_its_token(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    [name] = create_pods(api, namespace, 1)
    pod = api.read_namespaced_pod(name, namespace)
    assert pod.spec.service_account_name == "default"  # the ServiceAccount admission plugin is on
    projected = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
    assert len(projected) == 1 and pod.spec.containers[0].volume_mounts[0].mount_path.endswith("serviceaccount")
    wait_for("the root CA published", lambda: any(
        cm.metadata.name == "kube-root-ca.crt" for cm in api.list_namespaced_config_map(namespace).items), 30)
    request = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=["https://kubernetes.default.svc"]))
    token = api.create_namespaced_service_account_token("default", namespace, request).status.token
    review = k8s.AuthenticationV1Api(api.api_client).create_token_review(
        k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token)))
    assert review.status.authenticated and review.status.user.username == f"system:serviceaccount:{namespace}:default"
