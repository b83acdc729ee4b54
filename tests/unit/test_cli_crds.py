"""The command line around the CRDs: `crds`, `profiles manifests`, and serve's cluster flags refused early."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kube_fault_proxy.proxy.crd.objects import profile_from_object
from kube_fault_proxy.proxy.profiles.loader import load_file

ROOT = Path(__file__).resolve().parents[2]


def kfp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kube_fault_proxy", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_profiles_manifests_prints_objects_that_load_back_as_the_files() -> None:
    files = sorted((ROOT / "fault_profiles").glob("*.yaml"))[:3]
    r = kfp("profiles", "manifests", "--namespace", "chaos", *map(str, files))
    assert r.returncode == 0, r.stderr
    objects = list(yaml.safe_load_all(r.stdout))
    assert [o["metadata"]["namespace"] for o in objects] == ["chaos"] * 3
    assert [profile_from_object(o) for o in objects] == [load_file(f) for f in files]


def test_profiles_manifests_prints_nothing_when_a_file_is_bad(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: b}\nspec: {seed: -1}\n")
    r = kfp("profiles", "manifests", str(ROOT / "fault_profiles" / "pass-through.yaml"), str(bad))
    assert (r.returncode, r.stdout) == (2, "")
    assert f"{bad}:4:14: spec.seed: Input should be greater than or equal to 0" in r.stderr


@pytest.mark.parametrize(("user", "flags", "said"), [
    ({}, [], "has no credentials of its own"),
    ({"token": "t"}, ["--proxy-labels", "pool"], "--proxy-labels: expected KEY=VALUE, got 'pool'"),
    ({"token": "t"}, ["--proxy-labels", "pool=not ok!"], "--proxy-labels: not a Kubernetes label"),
    ({"token": "t"}, ["--status-interval", "5"], "--status-interval: not a duration: '5'"),
])
def test_serve_refuses_bad_cluster_flags_before_starting(tmp_path: Path, user: dict[str, str], flags: list[str],
                                                        said: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    r = kfp("serve", "--kubeconfig", str(kubeconfig), "--profiles-from-cluster", *flags)
    assert r.returncode == 2, r.stderr
    assert said in r.stderr


def test_serve_with_an_upstream_url_needs_a_client_certificate_for_the_cluster() -> None:
    r = kfp("serve", "--upstream", "https://127.0.0.1:1", "--profiles-from-cluster")
    assert r.returncode == 2
    assert "needs the proxy's own credentials: a --kubeconfig with a user, or --client-cert and --client-key" in r.stderr
