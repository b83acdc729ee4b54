"""FaultProfiles and FaultActivations on the local real control plane: the CRDs and the RBAC in deploy/
applied with the real kubectl, two `serve --profiles-from-cluster` replicas under a service-account
token bound to that Role, switched with `kubectl apply` and `kubectl delete`.

Replica `proxy-a` talks to the apiserver directly. Replica `proxy-b`'s upstream is a third
kube-fault-proxy, the relay: the replica's own requests bypass its own rules, so faults on its own
watches (dropped DELETED events, an expired re-watch) are injected by the relay it goes through.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kube_fault_proxy.proxy.crd.source import ACCESS
from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.cluster.proxy_process import ProxyProcess, start_serve
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.cluster import kubectl, start_cluster, stop_cluster, wait_for
from tests.support.crd_examples import REJECTED
from tests.support.processes import ROOT

NS = "kfp-fleet"
STATUS_INTERVAL = 2.0
FIGURES: dict[str, Any] = {}


def kubectl_run(c: Cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real kubectl as admin, whatever its exit code."""
    return subprocess.run([str(build.kubernetes("kubectl").binary), "--kubeconfig", str(c.kubeconfig("admin")),
                           *args], input=stdin, capture_output=True, text=True, timeout=60)


def apply(c: Cluster, *docs: dict[str, Any]) -> None:
    r = kubectl_run(c, "-n", NS, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert r.returncode == 0, r.stderr


def probe_profile(name: str, status: int = 503) -> dict[str, Any]:
    """Fails GETs of the ConfigMap named like the profile: what the tests send through each proxy."""
    return {"apiVersion": "kube-fault-proxy.io/v1", "kind": "FaultProfile", "metadata": {"name": name},
            "spec": {"rules": [{"name": "fail-probe", "match": {"verbs": ["get"], "resources": ["configmaps"],
                                                                "names": [name]},
                                "fault": {"abort": {"status": status}}}]}}


def activation(name: str, profile: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kube-fault-proxy.io/v1", "kind": "FaultActivation", "metadata": {"name": name},
            "spec": {"profile": profile, **spec}}


def read_journal(control: httpx.Client) -> list[dict[str, Any]]:
    """Every record of a proxy's journal, page by page."""
    records: list[dict[str, Any]] = []
    cursor = 0
    while True:
        page = control.get("/v1/journal", params={"since": cursor, "limit": 10000})
        page.raise_for_status()
        body = page.json()
        if not body["records"]:
            return records
        records += body["records"]
        cursor = body["next"]


class Replica:
    """One `serve --profiles-from-cluster` process."""

    def __init__(self, name: str, kubeconfig: Path, workdir: Path, admin_token: str) -> None:
        self.name, self.kubeconfig, self.workdir, self.token = name, kubeconfig, workdir, admin_token
        self.started: ProxyProcess | None = None
        self.start()

    def start(self) -> None:
        d = self.workdir
        self.started = start_serve(["--kubeconfig", str(self.kubeconfig), "--listen", "127.0.0.1:0",
                                    "--control", "127.0.0.1:0", "--journal", str(d / "journal.jsonl"),
                                    "--confdir", str(d / "ca"),
                                    "--profiles-from-cluster", "--namespace", NS, "--proxy-name", self.name,
                                    "--proxy-labels", f"pool=p,replica={self.name}",
                                    "--status-interval", f"{STATUS_INTERVAL:g}s"],
                                   d / "ready.json", d / f"serve-{time.monotonic_ns()}.log", timeout=90, cwd=ROOT,
                                   env={"KFP_STATE_DIR": str(d / "state")})
        self.control = httpx.Client(base_url=self.started.ready["controlUrl"], timeout=10)
        self.wire = httpx.Client(base_url=self.started.ready["proxyUrl"], verify=self.started.ready["caFile"],
                                 headers={"Authorization": f"Bearer {self.token}"}, timeout=10)

    def stop(self) -> None:
        assert self.started is not None
        self.wire.close()
        self.control.close()
        assert self.started.stop() == 0, self.started.log.read_text()

    def probe(self, name: str) -> int:
        """GET the probe ConfigMap through this proxy: 503 when injected, 404 when passed through."""
        return self.wire.get(f"/api/v1/namespaces/{NS}/configmaps/{name}").status_code

    def journal(self, event: str | None = None) -> list[dict[str, Any]]:
        return [r for r in read_journal(self.control) if event is None or r["event"] == event]

    def cluster(self) -> dict[str, Any]:
        return dict(self.control.get("/v1/cluster").json())


class Fleet:
    """The relay and the two replicas."""

    def __init__(self, c: Cluster, relay: ProxyProcess, a: Replica, b: Replica) -> None:
        self.c, self.relay, self.a, self.b = c, relay, a, b
        self.relay_control = httpx.Client(base_url=relay.ready["controlUrl"], timeout=10)

    @property
    def replicas(self) -> list[Replica]:
        return [self.a, self.b]

    def relay_activate(self, name: str, rules: list[dict[str, Any]]) -> None:
        doc = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": name},
               "spec": {"rules": rules}}
        self.relay_control.put(f"/v1/profiles/{name}", json=doc).raise_for_status()
        self.relay_control.put("/v1/active", json={"profile": name}).raise_for_status()

    def relay_nudge(self) -> None:
        """One request through the relay: it fires the relay's first-request rules (an outage, which
        closes this very connection too)."""
        with httpx.Client(verify=self.relay.ready["caFile"], timeout=10) as h, \
                contextlib.suppress(httpx.TransportError):
            h.get(self.relay.ready["proxyUrl"] + "/version")

    def status(self, act: str) -> dict[str, dict[str, Any]]:
        r = kubectl_run(self.c, "-n", NS, "get", "faultactivation", act, "-o", "json")
        assert r.returncode == 0, r.stderr
        return {p["name"]: p for p in (json.loads(r.stdout).get("status") or {}).get("proxies", [])}

    def delete(self, kind: str, name: str) -> None:
        r = kubectl_run(self.c, "-n", NS, "delete", kind, name, "--ignore-not-found")
        assert r.returncode == 0, r.stderr


def as_kubectl_lists(group: str, resource: str) -> str:
    """How `kubectl auth can-i --list` names a resource: faultactivations.GROUP/status."""
    name, sep, sub = resource.partition("/")
    return f"{name}.{group}{sep}{sub}"


def _sa_kubeconfig(path: Path, server: str, ca: str, token_file: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "kube-fault-proxy", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "kube-fault-proxy"}}]}))
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A control plane with no scheduler; kubectl built (or taken from the cache)."""
    build.build_all(["kubectl"])
    c = start_cluster(tmp_path_factory.mktemp("crd-cluster"), "--nodes", "1", "--scheduler", "none")
    yield c
    stop_cluster(c)


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    c = cluster
    kubectl(c, "admin", "apply", "-f", str(ROOT / "deploy" / "crds.yaml"))
    kubectl(c, "admin", "wait", "--for", "condition=Established", "--timeout", "60s",
            "crd/faultprofiles.kube-fault-proxy.io", "crd/faultactivations.kube-fault-proxy.io")
    kubectl(c, "admin", "create", "namespace", NS)
    kubectl(c, "admin", "-n", NS, "apply", "-f", str(ROOT / "deploy" / "rbac.yaml"))
    work = tmp_path_factory.mktemp("fleet")
    token = work / "sa.token"  # minted by the apiserver for the ServiceAccount that deploy/rbac.yaml binds
    token.write_text(kubectl(c, "admin", "-n", NS, "create", "token", "kube-fault-proxy", "--duration", "2h").strip())
    token.chmod(0o600)
    admin = c.state.tokens["admin"]
    relay = start_serve(["--kubeconfig", str(c.kubeconfig("proxy-upstream")),
                         "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--journal", str(work / "relay.jsonl"),
                         "--confdir", str(work / "relay-ca")],
                        work / "relay.json", work / "relay.log", timeout=60, cwd=ROOT,
                        env={"KFP_STATE_DIR": str(work / "relay")})
    direct = _sa_kubeconfig(work / "a.kubeconfig", c.apiserver, str(c.dir / "pki" / "ca.crt"), token)
    via_relay = _sa_kubeconfig(work / "b.kubeconfig", relay.ready["proxyUrl"], relay.ready["caFile"], token)
    (work / "a").mkdir()
    (work / "b").mkdir()
    f = Fleet(c, relay, Replica("proxy-a", direct, work / "a", admin), Replica("proxy-b", via_relay, work / "b", admin))
    yield f
    for r in f.replicas:
        r.stop()
    assert relay.stop() == 0
    print("\nfigures:", json.dumps(FIGURES, indent=1))


def test_deploy_manifests_pass_the_real_apiserver_and_the_role_is_all_the_proxy_may_do(fleet: Fleet) -> None:
    c = fleet.c
    kubectl(c, "admin", "create", "namespace", "kube-fault-proxy")
    r = kubectl_run(c, "apply", "--dry-run=server", "-k", str(ROOT / "deploy"))
    assert r.returncode == 0, r.stderr
    assert "deployment.apps/kube-fault-proxy created (server dry run)" in r.stdout
    r = kubectl_run(c, "apply", "--dry-run=server", "-f", str(ROOT / "deploy" / "scheduler" / "kubeconfig-secret.yaml"))
    assert r.returncode == 0, r.stderr
    can = kubectl(c, "admin", "-n", NS, "auth", "can-i", "--list", f"--as=system:serviceaccount:{NS}:kube-fault-proxy")
    granted = {line.split()[0]: line.split("[")[-1].rstrip("]") for line in can.splitlines()
               if "kube-fault-proxy.io" in line.split()[0]}
    assert granted == {as_kubectl_lists(group, resource): " ".join(verbs) for group, resource, verbs in ACCESS}


def test_the_shipped_profiles_as_manifests_pass_the_apiserver_and_load_on_both_replicas(fleet: Fleet) -> None:
    files = sorted((ROOT / "fault_profiles").glob("*.yaml"))
    manifests = subprocess.run([sys.executable, "-m", "kube_fault_proxy", "profiles", "manifests", *map(str, files)],
                               cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    r = kubectl_run(fleet.c, "-n", NS, "apply", "-f", "-", stdin=manifests)  # kubectl's default: strict validation
    assert r.returncode == 0, r.stderr
    names = {f.stem for f in files}
    assert {line.split()[0].split("/")[1] for line in r.stdout.splitlines()} == names
    wait_for("every shipped profile loaded from its object on both replicas", lambda: all(
        r.cluster()["profiles"] == dict.fromkeys(sorted(names), "ok") for r in fleet.replicas), 20)
    for r in fleet.replicas:
        sources = {p["name"]: p["source"] for p in r.control.get("/v1/profiles").json()["profiles"]}
        assert {n: sources[n] for n in names} == {n: f"cluster {NS}/{n}" for n in names}
    kubectl(fleet.c, "admin", "-n", NS, "delete", "faultprofiles", "--all")
    wait_for("the file profiles back", lambda: all(
        {p["name"]: p["source"] for p in r.control.get("/v1/profiles").json()["profiles"]}.get("bind-slow", "")
        .endswith("bind-slow.yaml") for r in fleet.replicas), 20)


@pytest.mark.parametrize(("spec", "said"), [pytest.param(s, m, id=i) for i, s, m in REJECTED])
def test_the_apiserver_refuses_what_the_loader_refuses(fleet: Fleet, spec: dict[str, Any], said: str) -> None:
    api = fleet.c.apiserver
    body = {"apiVersion": "kube-fault-proxy.io/v1", "kind": "FaultProfile", "metadata": {"name": "dry"}, "spec": spec}
    with httpx.Client(verify=str(fleet.c.dir / "pki" / "ca.crt"), timeout=10,
                      headers={"Authorization": f"Bearer {fleet.c.state.tokens["admin"]}"}) as h:
        r = h.post(f"{api}/apis/kube-fault-proxy.io/v1/namespaces/{NS}/faultprofiles",
                   params={"dryRun": "All", "fieldValidation": "Strict"}, json=body)
        assert r.status_code in (400, 422), (r.status_code, r.text)
        r = h.post(f"{api}/apis/kube-fault-proxy.io/v1/namespaces/{NS}/faultprofiles",
                   params={"dryRun": "All", "fieldValidation": "Strict"}, json={**body, "spec": {}})
        assert r.status_code == 201, r.text


def test_both_replicas_inject_on_apply_and_pass_through_on_delete(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-1"))
    t0 = time.monotonic()
    apply(fleet.c, activation("act-1", "probe-1"))
    seen: dict[str, float] = {}
    while len(seen) < 2 and time.monotonic() - t0 < 20:
        for r in fleet.replicas:
            if r.name not in seen and r.probe("probe-1") == 503:
                seen[r.name] = time.monotonic() - t0
        time.sleep(0.02)
    assert set(seen) == {"proxy-a", "proxy-b"}, seen
    FIGURES["applyToInjectingSeconds"] = {k: round(v, 3) for k, v in seen.items()}
    for r in fleet.replicas:
        [record] = [x for x in r.journal("activate") if x.get("activation") == f"{NS}/act-1"]
        assert (record["source"], record["profile"], record["generation"]) == ("cluster", "probe-1", 1)
        assert any(x["rule"] == "fail-probe" and x["request"]["name"] == "probe-1" for x in r.journal("inject"))
    wait_for("both proxies in the status, with their injections",
             lambda: {n: (p["active"], p["injections"] >= 1) for n, p in fleet.status("act-1").items()}
             == {"proxy-a": (True, True), "proxy-b": (True, True)}, timeout=3 * STATUS_INTERVAL + 5)
    for entry in fleet.status("act-1").values():
        assert entry["epoch"] >= 1 and entry["profile"] == "probe-1"
        assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [("Applied", "True", "Applied")]
    header, row = kubectl(fleet.c, "admin", "-n", NS, "get", "faultactivation", "act-1").splitlines()
    columns = ["NAME", "PROFILE", "SEED", "TTL", "FIRST PROXY", "AGE"]
    starts = [header.index(column) for column in columns]
    assert header.split() == " ".join(columns).split() and starts == sorted(starts)
    cells = [row[a:b].strip() for a, b in itertools.pairwise([*starts, None])]
    assert cells[:4] == ["act-1", "probe-1", "", ""]  # no seed, no TTL in this one
    assert cells[4] in ("proxy-a", "proxy-b")
    t0 = time.monotonic()
    fleet.delete("faultactivation", "act-1")
    wait_for("both proxies passing through", lambda: [r.probe("probe-1") for r in fleet.replicas] == [404, 404], 20,
             interval=0.02)
    FIGURES["deleteToPassThroughSeconds"] = round(time.monotonic() - t0, 3)
    for r in fleet.replicas:
        assert [x["reason"] for x in r.journal("deactivate") if x.get("activation") == f"{NS}/act-1"] == ["cluster"]


def test_status_is_written_at_most_every_interval_while_faults_flow(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-2"), activation("act-2", "probe-2"))
    wait_for("injecting", lambda: fleet.a.probe("probe-2") == 503, 20, interval=0.05)
    before, t0 = fleet.a.cluster()["statusWrites"], time.monotonic()
    injected = 0
    while time.monotonic() - t0 < 12:
        injected += fleet.a.probe("probe-2") == 503
        time.sleep(0.02)
    elapsed, writes = time.monotonic() - t0, fleet.a.cluster()["statusWrites"] - before
    FIGURES["statusWrites"] = {"seconds": round(elapsed, 1), "writes": writes, "injections": injected,
                               "interval": STATUS_INTERVAL}
    assert injected > 100
    assert 2 <= writes <= elapsed / STATUS_INTERVAL + 1, (writes, fleet.a.cluster())
    wait_for("every injection counted in the status", lambda: fleet.status("act-2")["proxy-a"]["injections"]
             >= injected, 3 * STATUS_INTERVAL + 5)
    fleet.delete("faultactivation", "act-2")


def test_an_invalid_profile_is_reported_while_the_old_one_stays(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-3"), activation("act-3", "probe-3"))
    wait_for("injecting", lambda: [r.probe("probe-3") for r in fleet.replicas] == [503, 503], 20, interval=0.05)
    bad = probe_profile("probe-3", status=700)  # the schema refuses it: nothing reaches the proxies
    r = kubectl_run(fleet.c, "-n", NS, "apply", "-f", "-", stdin=yaml.safe_dump(bad))
    assert r.returncode != 0 and "spec.rules[0].fault.abort.status" in r.stderr
    # What only the loader checks: a description over 4,096 characters (an annotation)
    kubectl(fleet.c, "admin", "-n", NS, "annotate", "faultprofile", "probe-3",
            f"kube-fault-proxy.io/description={'x' * 5000}")
    wait_for("both proxies reporting the invalid profile",
             lambda: {n: p["conditions"][0]["reason"] for n, p in fleet.status("act-3").items()}
             == {"proxy-a": "InvalidProfile", "proxy-b": "InvalidProfile"}, 15)
    for entry in fleet.status("act-3").values():
        assert entry["active"] is True
        assert entry["conditions"][0]["message"].startswith(
            f"FaultProfile {NS}/probe-3: metadata.description: String should have at most 4096 characters; "
            "the version that loaded last")
    assert [r.probe("probe-3") for r in fleet.replicas] == [503, 503]
    for r in fleet.replicas:
        assert len(r.journal("cluster-profile-invalid")) >= 1
    fleet.delete("faultactivation", "act-3")


def test_a_selector_names_one_proxy_and_the_other_keeps_passing_through(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-4"),
          activation("act-4", "probe-4", proxySelector={"kube-fault-proxy.io/proxy": "proxy-a"}))
    wait_for("proxy-a injecting", lambda: fleet.a.probe("probe-4") == 503, 20, interval=0.05)
    time.sleep(1)
    assert fleet.b.probe("probe-4") == 404
    wait_for("only proxy-a in the status", lambda: set(fleet.status("act-4")) == {"proxy-a"}, 10)
    apply(fleet.c, activation("act-4", "probe-4", proxySelector={"pool": "p", "replica": "proxy-b"}))
    wait_for("the selector moved to proxy-b", lambda: [r.probe("probe-4") for r in fleet.replicas] == [404, 503], 20,
             interval=0.05)
    wait_for("proxy-a's entry gone, proxy-b's there", lambda: set(fleet.status("act-4")) == {"proxy-b"}, 10)
    fleet.delete("faultactivation", "act-4")


def test_the_control_plane_and_the_cluster_last_change_wins(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-5"), activation("act-5", "probe-5"))
    wait_for("injecting", lambda: fleet.a.probe("probe-5") == 503, 20, interval=0.05)
    fleet.a.control.put("/v1/active", json={"profile": "pass-through"}).raise_for_status()
    assert fleet.a.probe("probe-5") == 404
    wait_for("proxy-a overridden in the status",
             lambda: fleet.status("act-5")["proxy-a"]["conditions"][0]["reason"] == "Overridden", 10)
    assert fleet.b.probe("probe-5") == 503
    apply(fleet.c, activation("act-5", "probe-5", seed=5))  # a change in the cluster: it wins again
    wait_for("proxy-a back on the cluster's activation", lambda: fleet.a.probe("probe-5") == 503, 20, interval=0.05)
    sources = [(r["event"], r.get("source") or r.get("reason"), r["profile"]) for r in fleet.a.journal()
               if r["event"] in ("activate", "deactivate") and r["profile"] in ("probe-5", "pass-through")]
    assert sources[-4:] == [("deactivate", "replaced", "probe-5"), ("activate", "api", "pass-through"),
                            ("deactivate", "replaced", "pass-through"), ("activate", "cluster", "probe-5")]
    fleet.delete("faultactivation", "act-5")


def test_a_time_to_live_ends_the_activation_on_both_replicas(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-9"), activation("act-9", "probe-9", ttlSeconds=4))
    wait_for("injecting", lambda: [r.probe("probe-9") for r in fleet.replicas] == [503, 503], 20, interval=0.05)
    wait_for("both passing through", lambda: [r.probe("probe-9") for r in fleet.replicas] == [404, 404], 10,
             interval=0.05)
    wait_for("both reporting it expired", lambda: {n: (p["active"], p["conditions"][0]["reason"]) for n, p in
                                                  fleet.status("act-9").items()}
             == {"proxy-a": (False, "Expired"), "proxy-b": (False, "Expired")}, 10)
    for r in fleet.replicas:
        [record] = [x for x in r.journal("activate") if x.get("activation") == f"{NS}/act-9"]
        assert 0 < record["ttlSeconds"] <= 4
        [ended] = [x for x in r.journal("deactivate") if x["profile"] == "probe-9"]
        assert ended["reason"] in ("ttl", "cluster"), ended  # the timer, or a reconcile just before it
    fleet.delete("faultactivation", "act-9")


def test_a_restarted_proxy_picks_the_activation_up_again(fleet: Fleet) -> None:
    apply(fleet.c, probe_profile("probe-6"), activation("act-6", "probe-6"))
    wait_for("injecting", lambda: [r.probe("probe-6") for r in fleet.replicas] == [503, 503], 20, interval=0.05)
    fleet.a.stop()
    stopped = fleet.status("act-6")["proxy-a"]
    assert (stopped["active"], stopped["conditions"][0]["reason"]) == (False, "ProxyStopped")
    fleet.a.start()
    wait_for("proxy-a injecting again", lambda: fleet.a.probe("probe-6") == 503, 20, interval=0.05)
    wait_for("proxy-a active in the status again", lambda: fleet.status("act-6")["proxy-a"]["active"] is True, 10)
    assert fleet.b.probe("probe-6") == 503
    starts = [r for r in fleet.a.journal() if r["event"] in ("proxy-start", "activate")]
    assert [r["event"] for r in starts][-2:] == ["proxy-start", "activate"]
    assert starts[-1]["activation"] == f"{NS}/act-6"
    fleet.delete("faultactivation", "act-6")
    wait_for("passing through", lambda: [r.probe("probe-6") for r in fleet.replicas] == [404, 404], 20, interval=0.05)


def test_a_profile_that_faults_the_proxies_own_kinds_does_not_fault_the_proxies(fleet: Fleet) -> None:
    """Activated from the cluster, a profile that expires every watch of FaultActivations and
    FaultProfiles and fails every other request for them: clients of the proxy get those faults,
    the proxy's own list, watch and status writes bypass them (they never go through the proxy)."""
    own = {"resources": ["faultactivations", "faultprofiles"]}
    profile = probe_profile("probe-8")
    profile["spec"]["rules"] += [
        {"name": "expire-own-watches", "match": {"verbs": ["watch"], **own}, "fault": {"expire": {}}},
        {"name": "fail-own-requests", "match": own, "fault": {"abort": {"status": 503}}}]
    before = {r.name: r.cluster() for r in fleet.replicas}
    apply(fleet.c, profile, activation("act-8", "probe-8"))
    wait_for("both injecting", lambda: [r.probe("probe-8") for r in fleet.replicas] == [503, 503], 20, interval=0.05)
    for r in fleet.replicas:  # a client of the proxy meets the rules
        assert r.wire.get(f"/apis/kube-fault-proxy.io/v1/namespaces/{NS}/faultactivations").status_code == 503
        assert r.wire.get(f"/apis/kube-fault-proxy.io/v1/namespaces/{NS}/faultactivations",
                          params={"watch": "1", "resourceVersion": "1"}).json()["object"]["code"] == 410
    wait_for("both statuses written", lambda: {n: p["conditions"][0]["reason"] for n, p in fleet.status("act-8").items()}
             == {"proxy-a": "Applied", "proxy-b": "Applied"}, 3 * STATUS_INTERVAL + 5)
    apply(fleet.c, activation("act-8", "probe-8", seed=8))  # a change the proxies' own watches must deliver
    wait_for("both on generation 2", lambda: all(
        [x["generation"] for x in r.journal("activate") if x.get("activation") == f"{NS}/act-8"] == [1, 2]
        for r in fleet.replicas), 20, interval=0.1)
    fleet.delete("faultactivation", "act-8")
    wait_for("both passing through", lambda: [r.probe("probe-8") for r in fleet.replicas] == [404, 404], 20,
             interval=0.05)
    for r in fleet.replicas:
        after = r.cluster()
        assert (after["relists"], after["watchErrors"]) == (before[r.name]["relists"], before[r.name]["watchErrors"])
        assert after["statusWriteErrors"] == before[r.name]["statusWriteErrors"]
        injected = {x["rule"] for x in r.journal("inject")}
        assert {"expire-own-watches", "fail-own-requests"} <= injected  # the two client requests above
        own_requests = [x for x in r.journal("inject") if x["rule"] in ("expire-own-watches", "fail-own-requests")]
        assert len(own_requests) == 2, own_requests


def test_the_replicas_own_watch_survives_a_dropped_delete_and_an_expired_rewatch(fleet: Fleet) -> None:
    """Through the relay, proxy-b's own FaultActivation watch loses a DELETED event; only a relist can
    find the deletion, and the relay forces one: a connection drop, then 410 Expired on the re-watch."""
    b, relay_journal = fleet.b, lambda: read_journal(fleet.relay_control)
    outage = {"name": "drop-connections", "when": {"maxInjections": 1}, "fault": {"outage": {"seconds": 1}}}
    fleet.relay_activate("drop-activation-deletes", [
        outage, {"name": "drop-deletes", "match": {"verbs": ["watch"], "resources": ["faultactivations"]},
                 "fault": {"dropEvents": {"events": {"types": ["DELETED"]}}}}])
    fleet.relay_nudge()
    wait_for("proxy-b's activation watch re-opened under the drop rule", lambda: fleet.relay_control.get(
        "/v1/stats").json()["rules"].get("drop-deletes", {}).get("injected", 0) >= 1, 30)
    apply(fleet.c, probe_profile("probe-7"), activation("act-7", "probe-7"))
    wait_for("both injecting", lambda: [r.probe("probe-7") for r in fleet.replicas] == [503, 503], 20, interval=0.05)
    fleet.delete("faultactivation", "act-7")
    wait_for("proxy-a passing through", lambda: fleet.a.probe("probe-7") == 404, 20, interval=0.05)
    time.sleep(3)
    assert b.probe("probe-7") == 503  # its watch never told it
    dropped = [r for r in relay_journal() if r["event"] == "watch-event" and r.get("action") == "dropped"]
    assert [(r["type"], r["name"]) for r in dropped] == [("DELETED", "act-7")]
    relists = b.cluster()["relists"]
    fleet.relay_activate("expire-activation-rewatch", [
        outage, {"name": "expire-rewatch", "match": {"verbs": ["watch"], "resources": ["faultactivations"]},
                 "when": {"maxInjections": 1}, "fault": {"expire": {"onlyRewatch": True}}}])
    t0 = time.monotonic()
    fleet.relay_nudge()
    wait_for("proxy-b passing through after its relist", lambda: b.probe("probe-7") == 404, 40, interval=0.05)
    FIGURES["expiredRewatchToPassThroughSeconds"] = round(time.monotonic() - t0, 3)
    assert b.cluster()["relists"] > relists
    [expired] = [r for r in relay_journal() if r["event"] == "inject" and r["rule"] == "expire-rewatch"]
    assert expired["request"]["resource"] == "faultactivations" and expired["request"]["verb"] == "watch"
    assert [x["reason"] for x in b.journal("deactivate") if x.get("activation") == f"{NS}/act-7"] == ["cluster"]
    fleet.relay_control.delete("/v1/active").raise_for_status()


def test_the_replicas_asked_the_apiserver_for_exactly_what_the_role_grants(fleet: Fleet) -> None:
    """proxy-b's own requests all went through the relay, which counted them by verb and resource."""
    seen = {key for key in fleet.relay_control.get("/v1/stats").json()["requestsByResource"]
            if key.split()[1] in ("faultprofiles", "faultactivations")}
    assert seen == {f"{verb} {resource.split('/')[0]}" for _, resource, verbs in ACCESS for verb in verbs}
    # The apiserver refused none of either replica's writes (no 403 from the Role, no 422). proxy-a
    # reached it directly and lost no write at all; proxy-b lost writes only in the relay's outages,
    # and wrote to act-7 while its watch had not told it act-7 was gone (404s, not errors).
    for r in fleet.replicas:
        state = r.cluster()
        assert state["statusWriteRefusals"] == 0, state
        assert "403" not in (state["lastError"] or ""), state
    assert fleet.a.cluster()["statusWriteErrors"] == 0
