"""Workload shapes: a pure function from (shape, node count, pod count, seed) to node specs and pod
specs, with a planned legal placement. The tight shapes end full or nearly full, where placement bugs live.

- roomy: the old default (16-cpu nodes, 100m pods), nothing near full;
- exact-fill: equal pods whose requests sum to exactly every node's allocatable (cpu, memory, pod count);
- mixed: pods of four sizes, every node one largest pod short of full (so any-fit always places them);
- tainted: a third of the nodes labelled and tainted NoSchedule; their pods select and tolerate them,
  the rest do neither; each pool filled exactly;
- anti-affinity: pods in pairs that require different nodes; one spare pod slot per node;
- dra: roomy nodes that each publish devices of the rig's fake DRA driver (workloads/dra.py), pods that need
  1-4 of them; every node has the devices its planned pods need plus the most one pod asks for (so any-fit
  always places them). Drawn only when asked for: it needs kube-controller-manager's resourceclaim-controller.
- dra-binding: dra whose devices have binding conditions (`DRADeviceBindingConditions`, GA in 1.38): a pod waits
  in the scheduler's PreBind until the rig's fake driver sets its devices Ready in the claim's status.
- gang: exact-fill's nodes with a spare unit slot each, and its pods in gangs of 2-4 (each a PodGroup with
  minCount its size, or one less for a third of the gangs of 3 or more; workloads/gang.py), created over time as
  the load creates them, so a gang waits at Permit until enough of its members have come. Any packing of unit
  pods fits, so every gang can be placed, and a probe pod still fits once they are. Drawn only when asked for: it
  needs the `GenericWorkload` gate and the v1beta1 API on, and kube-scheduler (YuniKorn's gangs are its own, not
  PodGroups).
- gang-late: gang whose last node comes late (a search trial's): the node is deleted before the load and created
  again, as it was, once the load is in, while the faults act, so the members planned on it wait for a node ADDED
  the scheduler must see (and a gang short of them waits at Permit). In a scenario, use gang and node steps.
- yunikorn-gang: YuniKorn's own gang scheduling (task groups; a scenario's only, for YuniKorn): every pod is an
  application of its own, a Hard-style gang whose task group asks for one placeholder more than there are nodes,
  each too big to share a 16-cpu node (YG_CPU_M). One placeholder per node is placed, the last never is: at the
  placeholder timeout (YG_TIMEOUT_S) the application fails, the shim deletes the placeholders and fails the pod.
  Each application so ends Failed inside the removal of its last placeholder (YUNIKORN-1993's path). There is no
  legal placement by design (`placement` says only which node each pod would fit on alone).
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from typing import Any

SHAPES = ("roomy", "exact-fill", "mixed", "tainted", "anti-affinity")
TIGHT = SHAPES[1:]
DEVICE_SHAPES = ("dra", "dra-binding")  # shapes that need more than the default cluster (workloads/dra.py)
BINDING_SHAPES = ("dra-binding",)  # device shapes whose devices wait for binding conditions (the driver sets them)
GANG_SHAPES = ("gang", "gang-late")  # shapes whose pods are in PodGroups (workloads/gang.py): GenericWorkload on
LATE_NODES = {"gang-late": 1}  # shapes whose last nodes come once the load is in (search trials): how many
ALL_SHAPES = SHAPES + DEVICE_SHAPES + GANG_SHAPES  # what the search draws from
YUNIKORN_GANG = "yunikorn-gang"  # YuniKorn's task groups: a scenario's shape only (TaskGroup)
SCENARIO_SHAPES = (*ALL_SHAPES, YUNIKORN_GANG)
MAX_DEVICES = 4  # the most devices one pod of the dra shape asks for
POOL_LABEL = "kube-fault-proxy/pool"
TAINT_KEY = "kube-fault-proxy/dedicated"
PAIR_LABEL = "kube-fault-proxy/pair"
HOSTNAME = "kubernetes.io/hostname"
CLAIM = "devices"  # a dra pod's name for its claim
GANG_LABEL = "kube-fault-proxy/gang"  # a gang member's label: its PodGroup's name
GANG_SIZES = (2, 4)  # the fewest and most members of one gang
YK = "yunikorn.apache.org/"  # the domain of YuniKorn's pod annotations


# yunikorn-gang: each placeholder (and pod) 12 cpu and 1Gi, so one fits a 16-cpu node; a 3 s placeholder timeout
YG_CPU_M, YG_MEMORY_MI, YG_TIMEOUT_S = 12000, 1024, 3
UNIT_CPU, MIB_PER_MILLICPU = 500, 2  # exact-fill's pod: 500m and 1000Mi
SIZES = (250, 500, 1000, 1500)  # mixed's pod sizes (millicpu; memory in proportion)


def claim_template(devices: int) -> str:
    """The ResourceClaimTemplate (workloads/dra.py publishes it) whose claims ask for `devices` devices."""
    return f"kfp-devices-{devices}"


@dataclass(frozen=True)
class NodeSpec:
    """What one node offers, and its labels and taints (beyond a kubelet's own)."""

    cpu_m: int
    memory_mi: int
    pods: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    devices: int = 0  # devices of the fake DRA driver the node publishes

    def allocatable(self) -> dict[str, str]:
        """Capacity and allocatable, in Kubernetes' quantities."""
        return {"cpu": f"{self.cpu_m}m", "memory": f"{self.memory_mi}Mi", "pods": str(self.pods)}


@dataclass(frozen=True)
class TaskGroup:
    """A YuniKorn gang of one task group, as its pods declare it: the shim (v1.9.0) reads the application from
    the `applicationId` label (utils.GetApplicationIDFromPod), the task groups from a JSON list in an annotation
    (cache.GetTaskGroupsFromAnnotation: name, minMember and minResource each required), the pod's group from
    another, and `placeholderTimeoutInSeconds` and `gangSchedulingStyle` (Hard or Soft) from a third, space-separated
    (cache.GetSchedulingPolicyParam)."""

    app: str  # the application, unique within the load (the load's run id goes before it)
    min_member: int
    cpu_m: int
    memory_mi: int
    timeout_s: int
    style: str = "Hard"
    name: str = "members"

    def annotations(self) -> dict[str, str]:
        """The annotations every pod of the gang carries."""
        groups = [{"name": self.name, "minMember": self.min_member,
                   "minResource": {"cpu": f"{self.cpu_m}m", "memory": f"{self.memory_mi}Mi"}}]
        return {f"{YK}task-groups": json.dumps(groups, separators=(",", ":")), f"{YK}task-group-name": self.name,
                f"{YK}schedulingPolicyParameters":
                    f"placeholderTimeoutInSeconds={self.timeout_s} gangSchedulingStyle={self.style}"}


@dataclass(frozen=True)
class PodSpec:
    """One pod's requests and placement constraints."""

    cpu_m: int
    memory_mi: int
    labels: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, str], ...] = ()
    anti_affinity: str | None = None  # the PAIR_LABEL value this pod must not share a node with
    devices: int = 0  # devices of the fake DRA driver it claims (through a ResourceClaimTemplate)
    gang: str | None = None  # the PodGroup it is a member of (spec.schedulingGroup)
    task_group: TaskGroup | None = None  # the YuniKorn gang it is a member of (yunikorn-gang)

    def spec_fields(self) -> dict[str, Any]:
        """The pod spec fields this shape sets (merged into the load's pod manifest)."""
        out: dict[str, Any] = {}
        if self.node_selector:
            out["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        if self.anti_affinity is not None:
            out["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {PAIR_LABEL: self.anti_affinity}}, "topologyKey": HOSTNAME}]}}
        if self.gang is not None:
            out["schedulingGroup"] = {"podGroupName": self.gang}
        if self.devices:
            out["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": claim_template(self.devices)}]
        return out

    def container_resources(self) -> dict[str, Any]:
        """The container `resources` fields beyond requests: the claim it uses."""
        return {"claims": [{"name": CLAIM}]} if self.devices else {}


@dataclass(frozen=True)
class Workload:
    """Node specs (in node-name order), pod specs, and a legal placement (pod index -> node index)."""

    shape: str
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]
    placement: tuple[int, ...]
    gangs: tuple[tuple[str, int], ...] = ()  # the gang shape's PodGroups: (name, minCount)
    late_nodes: int = 0  # how many of the last nodes come once the load is in (LATE_NODES)


ROOMY_NODE = NodeSpec(16000, 65536, 110)
SPECIAL_TAINT = {"key": TAINT_KEY, "value": "special", "effect": "NoSchedule"}
SPECIAL_TOLERATION = {"key": TAINT_KEY, "operator": "Equal", "value": "special", "effect": "NoSchedule"}


def _spread(pods: int, nodes: int) -> list[int]:
    """Pods per node, as even as it gets (the first nodes one more)."""
    return [pods // nodes + (1 if i < pods % nodes else 0) for i in range(nodes)]


def _in_turn(nodes: int, pods: int) -> tuple[int, ...]:
    """Pod j planned on node j mod nodes."""
    return tuple(j % nodes for j in range(pods))


def _filled(counts: list[int], spare: int = 0, **node: Any) -> list[NodeSpec]:
    """Nodes holding exactly `counts` unit pods, plus `spare` unit slots (an empty node keeps one slot)."""
    out = []
    for k in counts:
        slots = k + spare if k + spare > 0 else 1
        out.append(NodeSpec(slots * UNIT_CPU, slots * UNIT_CPU * MIB_PER_MILLICPU, slots, **node))
    return out


def _unit(**pod: Any) -> PodSpec:
    return PodSpec(UNIT_CPU, UNIT_CPU * MIB_PER_MILLICPU, **pod)


def generate(shape: str, nodes: int, pods: int, seed: int) -> Workload:
    """The shape's nodes and pods; raises ValueError for an unknown shape or a size below one."""
    if nodes < 1 or pods < 1:
        raise ValueError("a workload needs at least one node and one pod")
    # with or without binding conditions, or a late node: the same workload
    drawn = "dra" if shape in BINDING_SHAPES else "gang" if shape in LATE_NODES else shape
    rng = random.Random(f"kfp-shape:{drawn}:{nodes}:{pods}:{seed}")
    match shape:
        case "roomy":
            return Workload(shape, (ROOMY_NODE,) * nodes, (PodSpec(100, 64),) * pods, _in_turn(nodes, pods))
        case "exact-fill":
            return Workload(shape, tuple(_filled(_spread(pods, nodes))), (_unit(),) * pods,
                            tuple(j % nodes for j in range(pods)))
        case "mixed":
            sizes = [rng.choice(SIZES) for _ in range(pods)]
            placement = tuple(j % nodes for j in range(pods))
            specs = []
            for i in range(nodes):
                cpu = sum(s for s, n in zip(sizes, placement, strict=True) if n == i) + max(SIZES)
                specs.append(NodeSpec(cpu, cpu * MIB_PER_MILLICPU, 110))
            return Workload(shape, tuple(specs), tuple(PodSpec(s, s * MIB_PER_MILLICPU) for s in sizes), placement)
        case "tainted":
            special = max(1, nodes // 3)
            plain = nodes - special
            special_pods = pods if plain == 0 else max(1, min(pods - 1, round(pods * special / nodes)))
            plain_pods = pods - special_pods
            spec_nodes = _filled(_spread(special_pods, special), labels={POOL_LABEL: "special"},
                                 taints=(SPECIAL_TAINT,))
            plain_nodes = _filled(_spread(plain_pods, plain)) if plain else []
            chosen = rng.sample(range(pods), special_pods)  # which pods are the special ones
            chosen_set = set(chosen)
            pod_specs: list[PodSpec] = []
            planned: list[int] = []
            s_i = p_i = 0
            for j in range(pods):
                if j in chosen_set:
                    pod_specs.append(_unit(node_selector={POOL_LABEL: "special"}, tolerations=(SPECIAL_TOLERATION,)))
                    planned.append(s_i % special)
                    s_i += 1
                else:
                    pod_specs.append(_unit())
                    planned.append(special + p_i % plain)
                    p_i += 1
            return Workload(shape, (*spec_nodes, *plain_nodes), tuple(pod_specs), tuple(planned))
        case "anti-affinity":
            pod_specs = []
            for j in range(pods):
                pair = f"p{j // 2}" if nodes >= 2 and (j // 2) * 2 + 1 < pods else None
                pod_specs.append(_unit(labels={PAIR_LABEL: pair} if pair else {}, anti_affinity=pair))
            return Workload(shape, tuple(_filled(_spread(pods, nodes), spare=1)), tuple(pod_specs),
                            tuple(j % nodes for j in range(pods)))
        case "gang" | "gang-late":
            workload = _gangs(rng, nodes, pods)
            late = min(LATE_NODES.get(shape, 0), nodes - 1)  # one node at least is there from the start
            return dataclasses.replace(workload, shape=shape, late_nodes=max(late, 0))
        case "dra" | "dra-binding":
            return _devices(rng, shape, nodes, pods)
        case "yunikorn-gang":
            return _yunikorn_gangs(nodes, pods)
    raise ValueError(f"unknown workload shape {shape!r}; known: {', '.join(SCENARIO_SHAPES)}")


def _yunikorn_gangs(nodes: int, pods: int) -> Workload:
    """Roomy nodes, and each pod a YuniKorn application of one task group of nodes + 1 placeholders of its size."""
    groups = [TaskGroup(f"g{j}", nodes + 1, YG_CPU_M, YG_MEMORY_MI, YG_TIMEOUT_S) for j in range(pods)]
    return Workload(YUNIKORN_GANG, (ROOMY_NODE,) * nodes,
                    tuple(PodSpec(YG_CPU_M, YG_MEMORY_MI, task_group=g) for g in groups), _in_turn(nodes, pods))


def _devices(rng: random.Random, shape: str, nodes: int, pods: int) -> Workload:
    """Roomy nodes with the devices their planned pods need plus MAX_DEVICES, pods claiming 1 to MAX_DEVICES."""
    wants = [rng.randint(1, MAX_DEVICES) for _ in range(pods)]
    placement = tuple(j % nodes for j in range(pods))
    per_node = [sum(w for w, n in zip(wants, placement, strict=True) if n == i) + MAX_DEVICES for i in range(nodes)]
    return Workload(shape, tuple(NodeSpec(ROOMY_NODE.cpu_m, ROOMY_NODE.memory_mi, ROOMY_NODE.pods, devices=d)
                                 for d in per_node),
                    tuple(PodSpec(100, 64, devices=w) for w in wants), placement)


def _gangs(rng: random.Random, nodes: int, pods: int) -> Workload:
    """exact-fill's nodes with one spare unit slot each (room for the not-stuck probe) and its unit pods, the pods
    (in creation order) in gangs of GANG_SIZES members; a lone last
    pod joins the gang before it (or is a gang of one when there is a single pod)."""
    sizes: list[int] = []
    while sum(sizes) < pods:
        sizes.append(min(rng.randint(*GANG_SIZES), pods - sum(sizes)))
    if len(sizes) > 1 and sizes[-1] == 1:
        sizes[-2] += 1  # (not `+= sizes.pop()`: that would add to the one before, indexed after the pop)
        sizes.pop()
    gangs, specs = [], []
    for i, size in enumerate(sizes):
        name = f"g{i}"
        gangs.append((name, size - 1 if size >= 3 and rng.random() < 1 / 3 else size))
        specs += [_unit(labels={GANG_LABEL: name}, gang=name)] * size
    return Workload("gang", tuple(_filled(_spread(pods, nodes), spare=1)), tuple(specs),
                    tuple(j % nodes for j in range(pods)), tuple(gangs))


def node_patches(spec: NodeSpec, node: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata and spec merge patch, status merge patch) that give an existing node this spec: the shape's
    labels set and stale ones removed, the shape's taints in place of stale ones (others kept), its capacity."""
    labels: dict[str, Any] = {k: None for k in (node["metadata"].get("labels") or {}) if k == POOL_LABEL}
    labels.update(spec.labels)
    kept = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY]
    body: dict[str, Any] = {"metadata": {"labels": labels}, "spec": {"taints": [*kept, *spec.taints] or None}}
    resources = spec.allocatable()
    return body, {"status": {"capacity": resources, "allocatable": resources}}
