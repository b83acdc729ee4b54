"""deploy/: the manifests parse, agree with each other and with the proxy, and the Role grants exactly ACCESS.
(tests/cluster/test_profiles_from_cluster.py sends them to a real apiserver and runs the proxy under the Role.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kube_fault_proxy.cli.main import parser
from kube_fault_proxy.proxy.crd.source import ACCESS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def one(name: str, kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs(name) if d["kind"] == kind]
    return doc


def test_the_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def test_the_role_grants_exactly_what_the_source_asks_for() -> None:
    rules = one("rbac.yaml", "Role")["rules"]
    granted = {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == {(group, resource, verb) for group, resource, verbs in ACCESS for verb in verbs}
    binding = one("rbac.yaml", "RoleBinding")
    account = one("rbac.yaml", "ServiceAccount")["metadata"]["name"]
    assert binding["roleRef"]["name"] == one("rbac.yaml", "Role")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    pod = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account


def test_the_deployment_runs_serve_with_flags_the_cli_accepts() -> None:
    deployment = one("deployment.yaml", "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = [a.replace("$(POD_NAMESPACE)", "kube-fault-proxy").replace("$(POD_NAME)", "kube-fault-proxy-0")
            for a in container["args"]]
    parsed = parser().parse_args(args)
    assert parsed.profiles_from_cluster and parsed.namespace == "kube-fault-proxy"
    assert parsed.proxy_name == "kube-fault-proxy-0"
    assert {e["name"] for e in container["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    assert deployment["spec"]["replicas"] >= 2
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(parsed.kubeconfig).parent) in mounted and str(parsed.confdir).startswith("/state")
    upstream = yaml.safe_load(one("upstream-kubeconfig.yaml", "ConfigMap")["data"][Path(parsed.kubeconfig).name])
    [user] = upstream["users"]
    assert user["user"] == {"tokenFile": f"{SA_DIR}/token"}
    assert upstream["clusters"][0]["cluster"]["certificate-authority"] == f"{SA_DIR}/ca.crt"
    assert container["ports"][0]["containerPort"] == int(parsed.listen.rsplit(":", 1)[1])


def test_the_scheduler_kubeconfig_reaches_the_service() -> None:
    service = one("service.yaml", "Service")
    namespace = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"]
    secret = docs("scheduler/kubeconfig-secret.yaml")[0]
    kubeconfig = yaml.safe_load(secret["stringData"]["kubeconfig"])
    [cluster] = kubeconfig["clusters"]
    port = service["spec"]["ports"][0]["port"]
    assert cluster["cluster"]["server"] == f"https://{service['metadata']['name']}.{namespace}.svc:{port}"
    assert kubeconfig["users"][0]["user"] == {"tokenFile": f"{SA_DIR}/token"}  # the scheduler's own identity
    pod_labels = one("deployment.yaml", "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
