"""A search campaign as a Kubernetes Job: the Indexed Job whose pods each run one worker search (its own seed, its
own control plane inside the pod), as plain data; `search --on-cluster` applies it and `--print-job` prints it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kube_fault_proxy.rig.cluster import versions
from kube_fault_proxy.rig.search.outcome import Settings

WORKER_IMAGE = "localhost/kube-fault-proxy-worker:local"  # what scripts/search-worker-image builds
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # set by the Job controller on every pod it makes
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
FAILURES_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"  # an index's failed attempts before this pod
CAMPAIGN_LABEL = "kube-fault-proxy.io/campaign"
CACHE_DIR = "/opt/kfp-cache"  # the worker image's binaries (KFP_CACHE_DIR): etcd, kube-apiserver, …, kwok
WORK_DIR = "/work"  # an emptyDir: the worker's control plane, its output, HOME
START_MARGIN = 300.0  # seconds an attempt may take beyond its budget: the control plane's start, the last trial


def worker_seed(base: int, index: int) -> int:
    """The search seed of the worker at a completion index: each index runs a search of its own (a trial's genome
    depends on the corpus of the trials before it, so one search cannot be dealt out trial by trial)."""
    return base + index


@dataclass(frozen=True)
class Campaign:
    """How the campaign's Job is shaped (what `search --on-cluster` was asked beside the search's own settings)."""

    name: str
    namespace: str = "default"
    workers: int = 2  # completions: one completion index per worker search
    parallelism: int | None = None  # pods at once (None: every worker at once)
    retries_per_index: int = 1  # backoffLimitPerIndex: a failed or evicted worker is run again this often
    image: str = WORKER_IMAGE
    cpu: str = "500m"  # requested per worker pod: a control plane, the proxy and a scheduler
    memory: str = "1536Mi"  # requested, and the limit (etcd, kube-apiserver and the proxy's Python)
    node_selector: dict[str, str] = field(default_factory=dict)
    service_account: str | None = None  # the workers' ServiceAccount; None: `<name>-worker`, made with its Role

    def __post_init__(self) -> None:
        if self.workers < 1 or (self.parallelism is not None and self.parallelism < 1) or self.retries_per_index < 0:
            raise ValueError("a campaign needs at least 1 worker, parallelism at least 1 and retries at least 0")

    @property
    def waves(self) -> int:
        """How many rounds of pods the Job runs when fewer may run at once than there are workers."""
        return math.ceil(self.workers / (self.parallelism or self.workers))

    @property
    def account(self) -> str:
        """The ServiceAccount the worker pods run as."""
        return self.service_account or f"{self.name}-worker"

    def records_map(self, index: int) -> str:
        """The ConfigMap where the coordinator keeps index `index`'s records, for a retried worker to resume from."""
        return f"{self.name}-records-{index}"


def worker_args(s: Settings) -> list[str]:
    """The worker's command line: the search's own settings (the seed is the base; the worker adds its index), its
    budget, and where it works inside the pod. No control and no shrinking: the coordinator does those."""
    args = ["search", "--worker", "--target", s.scheduler, "--budget", f"{s.budget:.0f}s", "--seed", str(s.seed),
            "--kinds", ",".join(s.kinds), "--shapes", ",".join(s.shapes), "--nodes", str(s.nodes),
            "--pods", str(s.pods), "--canary-every", str(s.canary_every), "--control", "none",
            "-o", f"{WORK_DIR}/out", "--state-dir", f"{WORK_DIR}/state"]
    if s.max_trials is not None:
        args += ["--max-trials", str(s.max_trials)]
    if s.differential:
        args += ["--differential", str(s.differential)]
    for component, gates in s.feature_gates.items():
        args += [a for gate, on in gates.items() for a in ("--feature-gates", f"{component}:{gate}={str(on).lower()}")]
    if s.kubernetes != versions.KUBERNETES:
        args += ["--kubernetes", s.kubernetes]
    return args


def deadline(s: Settings, c: Campaign) -> int:
    """The Job's activeDeadlineSeconds: every wave's attempts, each its budget and a start margin."""
    return int(c.waves * (c.retries_per_index + 1) * (s.budget + START_MARGIN))


def labels_of(c: Campaign) -> dict[str, str]:
    """The labels of everything a campaign makes (its Job, pods, ConfigMaps, ServiceAccount, Role, RoleBinding)."""
    return {CAMPAIGN_LABEL: c.name, "app.kubernetes.io/name": "kube-fault-proxy-search-worker"}


def worker_rbac(c: Campaign) -> list[dict[str, Any]]:
    """The workers' ServiceAccount, and a Role that lets them read their index's records ConfigMap and nothing else
    (get, by name): what a retried worker resumes from. Empty when --worker-service-account names one already made."""
    if c.service_account is not None:
        return []
    meta = {"namespace": c.namespace, "labels": labels_of(c)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": c.account, **meta},
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": c.account, **meta},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                    "resourceNames": [c.records_map(i) for i in range(c.workers)]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": c.account, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": c.account},
         "subjects": [{"kind": "ServiceAccount", "name": c.account, "namespace": c.namespace}]}]


# What the coordinator does through kubectl in the Job's namespace: make the workers' ServiceAccount, Role and
# RoleBinding (server-side apply), make or find the Job and read its state, list its pods and read their logs, keep
# each index's records in a ConfigMap (server-side apply), and delete all of it at the end (by label). The guide's
# Role for a user of a real cluster is this list (a unit test holds them equal).
COORDINATOR_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["configmaps", "serviceaccounts"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
     "verbs": ["get", "list", "create", "patch", "delete"]},
]


def pod_failure_policy() -> dict[str, Any]:
    """An evicted or preempted worker (the pod's DisruptionTarget condition: the Eviction API, a node drain,
    preemption, a taint) is run again without counting against its index's retries; a worker that exits 2 (its
    settings or its records cannot make a search) fails its index at once, since a retry would fail the same."""
    return {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailIndex", "onExitCodes": {"containerName": "worker", "operator": "In", "values": [2]}}]}


def job(s: Settings, c: Campaign) -> dict[str, Any]:
    """The Indexed Job: `completions` worker searches, each index retried on its own (`backoffLimitPerIndex`), the
    pods unprivileged (a control plane on the pod's own loopback needs no capability; the service account's token
    reads only the index's records, to resume a retried index)."""
    labels = labels_of(c)
    volume_mounts = [{"name": "work", "mountPath": WORK_DIR}, {"name": "tmp", "mountPath": "/tmp"}]
    container = {
        "name": "worker", "image": c.image, "imagePullPolicy": "IfNotPresent",
        "command": ["kube-fault-proxy"], "args": worker_args(s),
        "env": [{"name": "HOME", "value": WORK_DIR}, {"name": "KFP_CACHE_DIR", "value": CACHE_DIR},
                {"name": "KFP_STATE_DIR", "value": f"{WORK_DIR}/kfp"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "JOB_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}}},
                {"name": "JOB_INDEX_FAILURES",
                 "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{FAILURES_ANNOTATION}']"}}}],
        "resources": {"requests": {"cpu": c.cpu, "memory": c.memory}, "limits": {"memory": c.memory}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": volume_mounts}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",  # a failed worker is the Job's to retry (per index), not the kubelet's
        "serviceAccountName": c.account, "automountServiceAccountToken": True,  # to read the index's records
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 60,  # a stopped worker stops its control plane and says so in its log
        "containers": [container],
        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]}
    if c.node_selector:
        pod["nodeSelector"] = dict(c.node_selector)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": c.name, "namespace": c.namespace, "labels": labels,
                     "annotations": {"kube-fault-proxy.io/search-seed": str(s.seed),
                                     "kube-fault-proxy.io/target": s.scheduler}},
        "spec": {"completionMode": "Indexed", "completions": c.workers, "parallelism": c.parallelism or c.workers,
                 "backoffLimitPerIndex": c.retries_per_index, "podFailurePolicy": pod_failure_policy(),
                 "activeDeadlineSeconds": deadline(s, c),
                 "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}}
