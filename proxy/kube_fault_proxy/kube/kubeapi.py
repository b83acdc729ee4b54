"""The rig's Kubernetes access, on lightkube: clients for one apiserver and user, pods and nodes as dicts.

lightkube does what the rig needs at the rate it needs (measured: the manual's
records, load clients): lists (msgspec decoding, a little faster than the hand-made httpx + json it
replaced), creates (more pods/s than the hand-made HTTP/2 loop at the default 8 in flight, within
the noise at 16 and 32, with less CPU at each), patches, and watches that resume from the last resourceVersion. What it
has no verb for is a non-resource URL, so /readyz is one plain GET with lightkube's connection
settings. The rig is not what is under test: the schedulers behind the proxy use their own client-go.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import msgspec
from lightkube import ApiError, AsyncClient, Client, ConfigError, KubeConfig
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from kube_fault_proxy.private_files import PrivateFiles

__all__ = ["SYSTEM_NAMESPACES", "ApiError", "ConfigError", "HTTPError", "Kube", "Node", "Pod", "TransportError",
           "WaitTimeout", "delete_namespace", "delete_pods", "ensure_namespace"]

# Pods and nodes as plain JSON dicts (what the checker, the sampler and their recorded test payloads
# read), decoded by msgspec; lightkube's typed models cost more per object than the rig needs.
Pod = create_namespaced_resource("", "v1", "Pod", "pods")
Node = create_global_resource("", "v1", "Node", "nodes")
HTTPError = httpx2.HTTPError
TransportError = httpx2.TransportError


class WaitTimeout(HTTPError):
    """Objects did not reach the state waited for in time; the message names the controller that makes it."""


@dataclass(frozen=True)
class Kube:
    """One apiserver and one user: a client per thread (an HTTP connection is not shared across
    threads), an asyncio client for load, and the readiness check."""

    config: SingleConfig
    timeout: float = 30.0
    files: PrivateFiles | None = field(default=None, compare=False)  # inline CA and keys, in memory

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None, timeout: float = 30.0) -> Kube:
        """The kubeconfig's current (or given) context; tokens, token files, client certificates and
        exec plugins are lightkube's to handle."""
        try:
            config = KubeConfig.from_file(path).get(context)
        except KeyError as e:  # lightkube's word for a context naming a cluster or user that is not there
            raise ConfigError(f"{path}: context {context!r} names no cluster or user {e}") from None
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        if config is None:
            raise ConfigError(f"{path}: no current context")
        files = PrivateFiles()
        return cls(_inline_data_to_private_files(config, files), timeout, files)

    @classmethod
    def from_token(cls, server: str, token: str, ca_file: Path, timeout: float = 30.0) -> Kube:
        """A bearer token and the CA that signs the apiserver."""
        kc = KubeConfig.from_one(cluster=Cluster(server=server, certificate_auth=str(ca_file)), user=User(token=token))
        config = kc.get()
        assert config is not None  # from_one makes its one context the current one
        return cls(config, timeout)

    @property
    def server(self) -> str:
        """The apiserver's URL."""
        return str(self.config.cluster.server)

    def client(self) -> Client:
        """A new synchronous client (HTTP/1.1, lightkube's default)."""
        return Client(self.config, timeout=httpx2.Timeout(self.timeout), field_manager="kube-fault-proxy")

    def async_client(self, http2: bool = False) -> AsyncClient:
        """A new asyncio client: HTTP/1.1 by default (a connection per request in flight), or every
        request on one HTTP/2 connection."""
        return AsyncClient(self.config, timeout=httpx2.Timeout(self.timeout), field_manager="kube-fault-proxy",
                           http2=http2)

    def ready(self) -> bool:
        """Whether /readyz says ok: a non-resource URL, the one call lightkube has no verb for, made with
        the connection settings (TLS, credentials) lightkube derives from the config."""
        params = ConnectionParams(timeout=httpx2.Timeout(5.0)).httpx_params(self.config)
        with httpx2.Client(**params) as http:
            return http.get("/readyz").text == "ok"


def _inline_data_to_private_files(config: SingleConfig, files: PrivateFiles) -> SingleConfig:
    """The kubeconfig's inline CA, certificate and key as private paths (a memfd where there is one).

    lightkube would write each to a temporary file in /tmp whenever it builds a client; kept in a
    memfd instead, key material never reaches a disk, as everywhere else in kube-fault-proxy."""
    cluster, user = config.cluster, config.user
    if cluster.certificate_auth_data:
        ca = files.put("kube-ca.pem", base64.b64decode(cluster.certificate_auth_data))
        cluster = msgspec.structs.replace(cluster, certificate_auth=str(ca), certificate_auth_data=None)
    if user is not None and user.client_cert_data and user.client_key_data:
        cert = files.put("kube-client.crt", base64.b64decode(user.client_cert_data))
        key = files.put("kube-client.key", base64.b64decode(user.client_key_data))
        user = msgspec.structs.replace(user, client_cert=str(cert), client_cert_data=None,
                                       client_key=str(key), client_key_data=None)
    return config._replace(cluster=cluster, user=user)


SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})  # never deleted


def ensure_namespace(client: Client, name: str, timeout: float = 30.0) -> None:
    """Create the namespace unless it exists; a new one is ready once its `default` ServiceAccount is
    there (kube-controller-manager makes it; the ServiceAccount admission plugin refuses pods before)."""
    try:
        client.create(Namespace(metadata=ObjectMeta(name=name)))
    except ApiError as e:
        if e.status.code != 409:
            raise
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.get(ServiceAccount, "default", namespace=name)
            return
        except ApiError as e:
            if e.status.code != 404:
                raise
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"namespace {name} has no default ServiceAccount after {timeout:.0f}s: is "
                              "kube-controller-manager (its serviceaccount controller) running?")
        time.sleep(0.05)


def delete_namespace(client: Client, name: str, timeout: float = 120.0, pods_at_once: bool = False,
                     wait: bool = True) -> bool:
    """Delete a namespace and (with `wait`) wait until it is gone (the namespace controller deletes its
    content first); False if it did not exist.

    `pods_at_once`: once the namespace is terminating (so no controller can create in it again), its
    pods are deleted with grace period 0, for the rig's own throwaway pods. The namespace controller
    would otherwise wait on their graceful deletion: 10.4 s per namespace of KWOK pods against 5.4 s
    (its fixed pause before it empties a namespace), measured on this project's local control plane."""
    try:
        client.delete(Namespace, name)
    except ApiError as e:
        if e.status.code == 404:
            return False
        raise
    if pods_at_once:
        delete_pods(client, name, (p["metadata"]["name"] for p in client.list(Pod, namespace=name)))
    if wait:
        wait_namespace_gone(client, name, timeout)
    return True


def delete_pods(client: Client, namespace: str, names: Iterable[str], concurrency: int = 16) -> int:
    """Delete pods with grace period 0, `concurrency` at a time; how many were there (a pod already gone is no
    error).

    Not `deletecollection`: the apiserver deletes a collection one object after another
    (`--delete-collection-workers` 1) within one request, so thousands of pods outlast a client's read timeout;
    and one by one from here, 2,500 pods took 20-30 s on the 2-core development VM."""
    def one(pod: str) -> bool:
        try:
            client.delete(Pod, pod, namespace=namespace, grace_period=0)
        except ApiError as e:
            if e.status.code != 404:
                raise
            return False
        return True

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kfp-delete") as pool:
        return sum(pool.map(one, list(names)))


def wait_namespace_gone(client: Client, name: str, timeout: float = 120.0) -> None:
    """Wait until a deleted namespace is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.get(Namespace, name)
        except ApiError as e:
            if e.status.code == 404:
                return
            raise
        time.sleep(0.2)
    raise WaitTimeout(f"namespace {name} still terminating after {timeout:.0f}s: is kube-controller-manager (its "
                      "namespace controller) running, and KWOK, which finishes the deletion of bound pods?")
