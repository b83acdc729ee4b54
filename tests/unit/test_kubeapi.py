"""The rig's Kubernetes access: lightkube clients from kubeconfigs and tokens, pods and nodes as dicts."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path
from typing import Any

import httpx2
import pytest
from kube_fault_proxy.kube.kubeapi import (
    ApiError,
    Kube,
    Node,
    Pod,
    WaitTimeout,
    delete_namespace,
    delete_pods,
    ensure_namespace,
)
from kube_fault_proxy.rig.cluster import pki
from lightkube import ConfigError
from lightkube.models.meta_v1 import Status

from tests.unit.test_upstream import write_kubeconfig


def test_a_token_kubeconfig_gives_clients_with_its_server_and_token(tmp_path: Path) -> None:
    kube = Kube.from_kubeconfig(write_kubeconfig(tmp_path, {"token": "t0k"}))
    assert kube.server == "https://127.0.0.1:6443/"
    assert kube.config.user is not None and kube.config.user.token == "t0k"


@pytest.mark.parametrize(("context", "error"), [
    ("nope", "config: Context 'nope' not found"),
    ("broken", "config: context 'broken' names no cluster or user 'missing'"),
])
def test_a_missing_or_broken_context_is_an_error_that_names_it(tmp_path: Path, context: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        Kube.from_kubeconfig(write_kubeconfig(tmp_path, {"token": "t"}), context)


def test_a_missing_kubeconfig_is_an_error_that_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing-here"):
        Kube.from_kubeconfig(tmp_path / "nothing-here")


def test_building_clients_leaves_no_key_material_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    certs = pki.make(tmp_path / "pki")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    user = {"client-certificate-data": base64.b64encode((certs / "admin.crt").read_bytes()).decode(),
            "client-key-data": base64.b64encode((certs / "admin.key").read_bytes()).decode()}
    path = write_kubeconfig(tmp_path, user)
    (tmp_path / "ca.crt").write_bytes((certs / "ca.crt").read_bytes())
    kube = Kube.from_kubeconfig(path)
    with kube.client() as one, kube.client() as two:
        assert one is not two
        assert list(scratch.iterdir()) == []  # nothing in the temporary directory, ever
    assert kube.config.user is not None and kube.config.user.client_key_data is None
    assert str(kube.config.user.client_key).startswith("/proc/self/fd/")  # a memfd: never on a disk


def test_a_token_and_a_ca_make_a_client_for_each_thread(tmp_path: Path) -> None:
    certs = pki.make(tmp_path / "pki")
    kube = Kube.from_token("https://127.0.0.1:6443", "t0k", certs / "ca.crt")
    assert kube.server == "https://127.0.0.1:6443"
    one, two = kube.client(), kube.client()
    try:
        assert one is not two
    finally:
        one.close()
        two.close()


def test_pods_and_nodes_are_plain_dicts() -> None:
    pod = Pod.from_dict({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": ""}})
    node = Node.from_dict({"metadata": {"name": "n"}})
    assert isinstance(pod, dict) and pod["spec"] == {"nodeName": ""} and pod.metadata.namespace == "ns"
    assert isinstance(node, dict) and node["metadata"]["name"] == "n"


class Creates:
    """A client whose create answers with the given status (None: created), and whose `default`
    ServiceAccount shows up after `missing` reads (None: never)."""

    def __init__(self, status: int | None, missing: int | None = 0) -> None:
        self.status, self.created = status, []  # type: tuple[int | None, list[Any]]
        self.missing, self.reads = missing, 0

    def create(self, obj: Any) -> Any:
        self.created.append(obj)
        if self.status is not None:
            raise ApiError(status=Status(code=self.status, message="no"))
        return obj

    def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        self.reads += 1
        assert (resource.__name__, name, namespace) == ("ServiceAccount", "default", "ns")
        if self.missing is None or self.reads <= self.missing:
            raise ApiError(status=Status(code=404, message="not found"))
        return {}


@pytest.mark.parametrize(("status", "raises"), [(None, False), (409, False), (403, True), (500, True)])
def test_ensure_namespace_is_fine_with_one_that_exists(status: int | None, raises: bool) -> None:
    client = Creates(status)
    if raises:
        with pytest.raises(httpx2.HTTPError):
            ensure_namespace(client, "ns")  # type: ignore[arg-type]
    else:
        ensure_namespace(client, "ns")  # type: ignore[arg-type]
    assert [obj.metadata.name for obj in client.created] == ["ns"]
    assert client.reads == (1 if status is None else 0)  # only a new namespace waits for its ServiceAccount


def test_a_new_namespace_is_ready_once_its_default_service_account_is_there() -> None:
    client = Creates(None, missing=3)
    ensure_namespace(client, "ns")  # type: ignore[arg-type]
    assert client.reads == 4


def test_a_namespace_that_never_gets_its_service_account_names_the_controller_manager() -> None:
    with pytest.raises(WaitTimeout, match=r"namespace ns has no default ServiceAccount after 0s: is "
                                          r"kube-controller-manager \(its serviceaccount controller\) running\?"):
        ensure_namespace(Creates(None, missing=None), "ns", timeout=0.1)  # type: ignore[arg-type]


class Deletes:
    """A client deleting a namespace: the delete answers `status` (None: accepted); then the namespace
    is still there for `terminating` reads."""

    def __init__(self, status: int | None, terminating: int | None, pods: tuple[str, ...] = ("a", "b")) -> None:
        self.status, self.terminating, self.reads = status, terminating, 0
        self.pods = pods
        self.pod_deletes: list[tuple[str, str, int]] = []

    def delete(self, resource: Any, name: str, namespace: str | None = None, grace_period: int | None = None) -> None:
        if resource.__name__ == "Pod":
            assert grace_period == 0
            self.pod_deletes.append((name, namespace or "", grace_period))
            return
        assert (resource.__name__, name) == ("Namespace", "ns")
        if self.status is not None:
            raise ApiError(status=Status(code=self.status, message="no"))

    def list(self, resource: Any, namespace: str) -> list[dict[str, Any]]:
        assert resource.__name__ == "Pod"
        return [{"metadata": {"name": n, "namespace": namespace}} for n in self.pods]

    def get(self, resource: Any, name: str) -> Any:
        self.reads += 1
        if self.terminating is None or self.reads <= self.terminating:
            return {"status": {"phase": "Terminating"}}
        raise ApiError(status=Status(code=404, message="gone"))


def test_deleting_a_namespace_waits_until_it_is_gone() -> None:
    client = Deletes(None, terminating=2)
    assert delete_namespace(client, "ns") is True  # type: ignore[arg-type]
    assert client.reads == 3


def test_a_namespace_deleted_with_its_pods_at_once_deletes_them_after_it_terminates() -> None:
    client = Deletes(None, terminating=1)
    assert delete_namespace(client, "ns", pods_at_once=True) is True  # type: ignore[arg-type]
    assert sorted(client.pod_deletes) == [("a", "ns", 0), ("b", "ns", 0)] and client.reads == 2
    untouched = Deletes(None, terminating=1)
    assert delete_namespace(untouched, "ns") is True  # type: ignore[arg-type]
    assert untouched.pod_deletes == []
    unwaited = Deletes(None, terminating=None)
    assert delete_namespace(unwaited, "ns", pods_at_once=True, wait=False) is True  # type: ignore[arg-type]
    assert len(unwaited.pod_deletes) == 2 and unwaited.reads == 0  # not read: not waited for
    missing = Deletes(404, 0)
    assert delete_namespace(missing, "ns", pods_at_once=True) is False  # type: ignore[arg-type]
    assert missing.pod_deletes == []  # nothing deleted in a namespace that is not there


class PodDeletes:
    """A client whose pod deletes answer by name: 404 for `gone`, `refused` for `denied`, else accepted."""

    def __init__(self, gone: set[str], denied: frozenset[str] = frozenset(), refused: int = 403) -> None:
        self.gone, self.denied, self.refused = gone, denied, refused
        self.deleted: list[str] = []

    def delete(self, resource: Any, name: str, namespace: str, grace_period: int) -> None:
        assert (resource.__name__, namespace, grace_period) == ("Pod", "ns", 0)
        if name in self.gone:
            raise ApiError(status=Status(code=404, message="gone"))
        if name in self.denied:
            raise ApiError(status=Status(code=self.refused, message="no"))
        self.deleted.append(name)


def test_pods_are_deleted_at_once_and_one_already_gone_is_no_error() -> None:
    client = PodDeletes(gone={"p3"})
    names = [f"p{i}" for i in range(40)]
    assert delete_pods(client, "ns", iter(names), concurrency=8) == 39  # type: ignore[arg-type]
    assert sorted(client.deleted) == sorted(set(names) - {"p3"})


def test_a_pod_delete_refused_otherwise_is_raised() -> None:
    with pytest.raises(ApiError):
        delete_pods(PodDeletes(gone=set(), denied=frozenset({"p1"})), "ns", ["p0", "p1", "p2"])  # type: ignore[arg-type]


def test_deleting_a_namespace_that_is_not_there_is_fine() -> None:
    assert delete_namespace(Deletes(404, 0), "ns") is False  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        delete_namespace(Deletes(403, 0), "ns")  # type: ignore[arg-type]


def test_a_namespace_that_stays_terminating_names_the_controllers() -> None:
    with pytest.raises(WaitTimeout, match=r"namespace ns still terminating after 0s: is kube-controller-manager"):
        delete_namespace(Deletes(None, terminating=None), "ns", timeout=0.1)  # type: ignore[arg-type]
