"""The safety invariants on recorded-style payloads: each break is caught, a full but legal cluster passes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from kube_fault_proxy.rig.invariants.check import Snapshot, evaluate, render
from kube_fault_proxy.rig.invariants.safety import SAFETY, check_safety

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
Obj = dict[str, Any]


def at(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: int = 110, labels: dict[str, str] | None = None,
         taints: list[Obj] | None = None, unschedulable: bool = False, **more: str) -> Obj:
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), **more}
    spec: Obj = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})}},
            "spec": spec, "status": {"capacity": alloc, "allocatable": alloc}}


def pod(name: str, on: str | None, cpu: str = "1", memory: str = "1Gi", namespace: str = "default",
        bound: float = 5.0, **spec: Any) -> Obj:
    labels = spec.pop("labels", {})
    storage = spec.pop("storage", None)
    requests = {"cpu": cpu, "memory": memory, **({"ephemeral-storage": storage} if storage else {})}
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(bound)}] if on else []
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels,
                         "creationTimestamp": at(0)},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}],
                     "schedulerName": "default-scheduler", **({"nodeName": on} if on else {}), **spec},
            "status": {"phase": "Running" if on else "Pending", "conditions": conditions}}


def anti(app: str, key: str = "kubernetes.io/hostname", **term: Any) -> Obj:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **term}]}}


def required(*expressions: Obj) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}


NO_SCHEDULE = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def full_but_legal() -> tuple[list[Obj], list[Obj], dict[str, float]]:
    """Every node exactly full, every rule kept: what a good scheduler leaves behind."""
    nodes = [node("n1"), node("n2", labels={"disk": "ssd", "gen": "5"}), node("n3", taints=[NO_SCHEDULE]),
             node("n4", pods=2, cpu="1", memory="1Gi", **{"ephemeral-storage": "10Gi"}),
             node("n5", unschedulable=True, taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
             node("n6", unschedulable=True)]
    pods = [
        *(pod(f"a{i}", "n1", cpu="1", memory="2Gi") for i in range(4)),  # 4 of 4 cpu, 8Gi of 8Gi: exactly full
        pod("sel", "n2", cpu="2", nodeSelector={"disk": "ssd"}),
        pod("aff", "n2", cpu="1500m", affinity=required({"key": "gen", "operator": "Gt", "values": ["4"]},
                                                           {"key": "disk", "operator": "Exists"})),
        pod("half", "n2", cpu="500m", memory="6Gi"),
        pod("tol", "n3", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
        pod("tol-all", "n3", tolerations=[{"operator": "Exists"}]),
        pod("tol-key", "n3", tolerations=[{"key": "dedicated", "operator": "Exists"}]),
        pod("small1", "n4", cpu="500m", memory="512Mi", storage="5Gi"),
        pod("small2", "n4", cpu="500m", memory="512Mi", storage="5Gi"),  # 2 of 2 pods, 10Gi of 10Gi storage
        pod("before-cordon", "n5", bound=5),  # cordoned at 10 s, bound at 5 s: fine
        pod("unknown-cordon", "n6", bound=50),  # unschedulable now, but when it was cordoned is not known
        pod("db-1", "n1", cpu="0", memory="0", labels={"app": "db"}, affinity=anti("db")),
        pod("db-2", "n2", cpu="0", memory="0", labels={"app": "db"}, affinity=anti("db")),  # another node
        pod("pending", None, cpu="64"),  # unbound: holds no place
    ]
    done = pod("done", "n1", cpu="8")
    done["status"]["phase"] = "Succeeded"
    going = pod("going", "n1", cpu="8")
    going["metadata"]["deletionTimestamp"] = at(60)
    return [*pods, done, going], nodes, {"n5": T0 + 10}


def test_a_full_but_legal_cluster_keeps_every_safety_invariant() -> None:
    pods, nodes, cordoned = full_but_legal()
    assert check_safety(pods, nodes, cordoned) == []
    report = evaluate(Snapshot(pods, nodes, T0 + 100, cordoned=cordoned), {"default-scheduler"}, grace=1e9)
    assert report.ok, render(report)
    assert [k for k in report.checked if k in SAFETY] == list(SAFETY)


def three_2cpu_pods_on_a_4cpu_node(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods += [pod(f"big{i}", "n7", cpu="2") for i in range(3)]
    nodes.append(node("n7"))


def memory_over(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("fat", "n1", cpu="0", memory="512Mi"))


def storage_over(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods[pods.index(next(p for p in pods if p["metadata"]["name"] == "small1"))] = pod(
        "small1", "n4", cpu="500m", memory="512Mi", storage="5.5Gi")


def pod_count_over(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("third", "n4", cpu="0", memory="0"))


def untolerated_no_schedule(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("intruder", "n3", cpu="0", memory="0"))


def wrong_value_toleration(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("intruder", "n3", cpu="0", memory="0",
                    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}]))


def untolerated_no_execute(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    nodes.append(node("n8", taints=[{"key": "evict", "effect": "NoExecute", "timeAdded": at(1)}]))
    pods.append(pod("evicted", "n8", bound=5))


def selector_violated(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("lost", "n1", cpu="0", memory="0", nodeSelector={"disk": "ssd"}))


def affinity_violated(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("lost", "n1", cpu="0", memory="0",
                    affinity=required({"key": "disk", "operator": "In", "values": ["ssd"]})))


def affinity_not_in_violated(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("lost", "n2", cpu="0", memory="0",
                    affinity=required({"key": "gen", "operator": "NotIn", "values": ["5"]})))


def bound_after_cordon(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("late", "n5", cpu="0", memory="0", bound=30))  # cordoned at 10 s


def anti_affinity_pair(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("db-3", "n1", cpu="0", memory="0", labels={"app": "db"}))  # beside db-1, which repels it


def anti_affinity_across_namespaces(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    pods.append(pod("web", "n2", cpu="0", memory="0", namespace="web", labels={"app": "web"},
                    affinity=anti("db", namespaces=["default"])))


def anti_affinity_by_zone(pods: list[Obj], nodes: list[Obj], cordoned: dict[str, float]) -> None:
    nodes += [node("z1", labels={"zone": "a"}), node("z2", labels={"zone": "a"})]
    pods += [pod("zone-1", "z1", labels={"app": "one-per-zone"}, affinity=anti("one-per-zone", "zone")),
             pod("zone-2", "z2", labels={"app": "one-per-zone"})]


@pytest.mark.parametrize(
    ("mutate", "invariant", "kind", "message"),
    [
        (three_2cpu_pods_on_a_4cpu_node, "no-overcommit", "cpu", "n7 cpu: 6 of 4 requested by 3 pods"),
        (memory_over, "no-overcommit", "memory", "n1 memory: 8704Mi of 8192Mi requested by 6 pods"),
        (storage_over, "no-overcommit", "ephemeral-storage", "n4 ephemeral-storage: 10752Mi of 10240Mi requested by 2 pods"),
        (pod_count_over, "no-overcommit", "pods", "n4 pods: 3 of 2 pods bound"),
        (untolerated_no_schedule, "no-untolerated-taint", "NoSchedule",
         "default/intruder is on n3, whose taint dedicated=gpu:NoSchedule it does not tolerate"),
        (wrong_value_toleration, "no-untolerated-taint", "NoSchedule",
         "default/intruder is on n3, whose taint dedicated=gpu:NoSchedule it does not tolerate"),
        (untolerated_no_execute, "no-untolerated-taint", "NoExecute",
         "default/evicted is on n8, whose taint evict:NoExecute it does not tolerate"),
        (selector_violated, "no-excluded-node", "nodeSelector",
         "default/lost is on n1, but its nodeSelector wants disk=ssd (the node has no disk)"),
        (affinity_violated, "no-excluded-node", "nodeAffinity",
         "default/lost is on n1, but no nodeSelectorTerm of its required node affinity matches the node"),
        (affinity_not_in_violated, "no-excluded-node", "nodeAffinity",
         "default/lost is on n2, but no nodeSelectorTerm of its required node affinity matches the node"),
        (bound_after_cordon, "no-bind-to-cordoned-node", "",
         "default/late was bound to n5 at 2026-01-01T00:00:30Z or later; the node was cordoned by 2026-01-01T00:00:10Z"),
        (anti_affinity_pair, "no-anti-affinity-breach", "kubernetes.io/hostname",
         "default/db-1 and default/db-3 are both on n1; default/db-1's required anti-affinity "
         "(kubernetes.io/hostname) selects default/db-3"),
        (anti_affinity_across_namespaces, "no-anti-affinity-breach", "kubernetes.io/hostname",
         "web/web and default/db-2 are both on n2; web/web's required anti-affinity (kubernetes.io/hostname) "
         "selects default/db-2"),
        (anti_affinity_by_zone, "no-anti-affinity-breach", "zone",
         "default/zone-1 and default/zone-2 are on z1 and z2, both zone=a; default/zone-1's required "
         "anti-affinity (zone) selects default/zone-2"),
    ],
    ids=["overcommitted-cpu", "overcommitted-memory", "overcommitted-storage", "too-many-pods", "taint",
         "taint-other-value", "taint-no-execute", "selector", "required-affinity", "required-affinity-not-in",
         "bound-after-cordon", "anti-affinity-pair", "anti-affinity-namespaces", "anti-affinity-zone"],
)
def test_each_break_is_caught(mutate: Callable[[list[Obj], list[Obj], dict[str, float]], None],
                              invariant: str, kind: str, message: str) -> None:
    pods, nodes, cordoned = full_but_legal()
    mutate(pods, nodes, cordoned)
    [v] = check_safety(pods, nodes, cordoned)
    assert (v.invariant, v.kind, v.message) == (invariant, kind, message)


def test_an_overcommit_carries_the_node_the_pods_and_the_numbers() -> None:
    pods, nodes, cordoned = full_but_legal()
    three_2cpu_pods_on_a_4cpu_node(pods, nodes, cordoned)
    [v] = check_safety(pods, nodes, cordoned)
    assert v.as_dict() == {"invariant": "no-overcommit", "message": "n7 cpu: 6 of 4 requested by 3 pods",
                           "objects": ["default/big0", "default/big1", "default/big2"], "kind": "cpu", "node": "n7",
                           "numbers": {"requested": 6.0, "allocatable": 4.0, "pods": 3, "smallest": 2.0}}
    fractional = [pod(f"p{i}", "n9", cpu="5500m") for i in range(3)]
    [v] = check_safety(fractional, [node("n9", cpu="16")], {})
    assert v.message == "n9 cpu: 16.5 of 16 requested by 3 pods"


def test_many_small_requests_fill_a_node_exactly() -> None:
    """160 pods of 100m on 16 cpu: exact arithmetic, no float drift into a false over-commit."""
    pods = [pod(f"p{i}", "n1", cpu="100m", memory="0") for i in range(160)]
    assert check_safety(pods, [node("n1", cpu="16", pods=200)], {}) == []
    [v] = check_safety([*pods, pod("one-more", "n1", cpu="1m", memory="0")], [node("n1", cpu="16", pods=200)], {})
    assert v.message == "n1 cpu: 16.001 of 16 requested by 161 pods"


@pytest.mark.parametrize(
    ("taint", "bound", "judged"),
    [
        ({"key": "evict", "effect": "NoExecute", "timeAdded": at(30)}, 5, False),  # tainted after the Binding
        ({"key": "evict", "effect": "NoExecute", "timeAdded": at(5)}, 5, False),  # the same second: maybe after
        ({"key": "evict", "effect": "NoExecute", "timeAdded": at(4)}, 5, True),
        ({"key": "evict", "effect": "NoSchedule"}, 5, True),  # no time: there at the Binding (the rig's taints are)
        ({"key": "soft", "effect": "PreferNoSchedule"}, 5, False),
        ({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}, 5, False),  # the lifecycle's: not judged
        ({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": at(1)}, 5, False),
    ],
)
def test_when_a_taint_counts(taint: Obj, bound: float, judged: bool) -> None:
    found = check_safety([pod("p", "n1", bound=bound)], [node("n1", taints=[taint])], {})
    assert bool(found) is judged


@pytest.mark.parametrize(
    ("cordoned_at", "bound", "unschedulable", "tolerations", "judged"),
    [
        (10, 30, True, [], True),
        (10, 10, True, [], False),  # the same second: the Binding may have come first
        (10, 5, True, [], False),  # bound, then cordoned: fine
        (None, 30, True, [], False),  # no known cordon time: not judged
        (10, 30, False, [], False),  # uncordoned since
        (10, 30, True, [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], False),  # tolerates it
    ],
)
def test_when_a_cordon_counts(cordoned_at: float | None, bound: float, unschedulable: bool,
                              tolerations: list[Obj], judged: bool) -> None:
    cordoned = {} if cordoned_at is None else {"n1": T0 + cordoned_at}
    p = pod("p", "n1", bound=bound, tolerations=tolerations)
    assert bool(check_safety([p], [node("n1", unschedulable=unschedulable)], cordoned)) is judged


def test_without_a_scheduled_condition_the_creation_bounds_the_binding() -> None:
    p = pod("p", "n1", bound=30)
    p["status"]["conditions"] = []  # placed by hand (spec.nodeName): no Binding, no PodScheduled
    p["metadata"]["creationTimestamp"] = at(20)
    assert check_safety([p], [node("n1", unschedulable=True)], {"n1": T0 + 10})
    p["metadata"]["creationTimestamp"] = at(5)
    assert not check_safety([p], [node("n1", unschedulable=True)], {"n1": T0 + 10})


def test_a_namespace_scoped_check_judges_what_its_pods_take_part_in() -> None:
    pods = [pod("a", "n1", cpu="3", namespace="mine"), pod("b", "n1", cpu="3", namespace="other"),
            pod("c", "n2", cpu="3", namespace="other"), pod("d", "n2", cpu="3", namespace="other"),
            pod("e", "n2", cpu="0", namespace="mine", labels={"app": "x"}),
            pod("f", "n2", cpu="0", namespace="other", affinity=anti("x", namespaces=["mine"]))]
    nodes = [node("n1"), node("n2")]
    assert {v.node for v in check_safety(pods, nodes, {})} == {"n1", "n2"}
    assert [(v.invariant, v.node) for v in check_safety(pods, nodes, {}, "mine")] == [
        ("no-overcommit", "n1"), ("no-overcommit", "n2"), ("no-anti-affinity-breach", "n2")]
    assert check_safety(pods, nodes, {}, "elsewhere") == []


def test_pods_on_missing_nodes_are_left_to_missing_node() -> None:
    assert check_safety([pod("p", "ghost", cpu="99")], [node("n1")], {}) == []


def test_the_report_shows_an_overcommit_by_its_numbers() -> None:
    pods, nodes, cordoned = full_but_legal()
    three_2cpu_pods_on_a_4cpu_node(pods, nodes, cordoned)
    report = evaluate(Snapshot(copy.deepcopy(pods), nodes, T0 + 100, cordoned=cordoned), {"default-scheduler"},
                      grace=1e9)
    text = render(report)
    assert "no-overcommit" in text and "n7 cpu: 6 of 4 requested by 3 pods" in text
    assert report.as_dict()["invariants"]["no-overcommit"] == {
        "holds": False, "name": "no-overcommit", "violations": 1,
        "description": report.as_dict()["invariants"]["no-overcommit"]["description"]}
