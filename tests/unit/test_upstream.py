"""Reading kubeconfigs and deriving the proxied one."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from kube_fault_proxy.private_files import PrivateFiles
from kube_fault_proxy.proxy.upstream import KubeconfigError, proxied, read, upstream_from


def write_kubeconfig(tmp_path: Path, user: dict[str, object]) -> Path:
    (tmp_path / "ca.crt").write_bytes(b"CA")
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "real",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443/",
                                               "certificate-authority": "ca.crt"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "real", "context": {"cluster": "c", "user": "u"}},
                     {"name": "broken", "context": {"cluster": "missing", "user": "u"}}],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_token_user(tmp_path: Path) -> None:
    view = read(write_kubeconfig(tmp_path, {"token": "t0k"}))
    up = upstream_from(view, PrivateFiles(tmp_path / "run").put)
    assert up.url == "https://127.0.0.1:6443"
    assert up.ca_file is not None and up.ca_file.read_bytes() == b"CA"
    assert up.client_pem is None
    doc = proxied(view, "https://127.0.0.1:7443", b"PROXYCA")
    assert doc["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:7443",
        "certificate-authority-data": base64.b64encode(b"PROXYCA").decode()}
    assert doc["users"][0]["user"] == {"token": "t0k"}


@pytest.mark.parametrize("in_memory", [True, False], ids=["memfd", "private-dir"])
def test_client_cert_user_is_joined_into_one_private_pem(tmp_path: Path, in_memory: bool) -> None:
    user = {"client-certificate-data": base64.b64encode(b"CERT").decode(),
            "client-key-data": base64.b64encode(b"KEY").decode()}
    with PrivateFiles(tmp_path / "run", in_memory=in_memory) as files:
        up = upstream_from(read(write_kubeconfig(tmp_path, user)), files.put)
        assert up.client_pem is not None
        assert up.client_pem.read_bytes() == b"KEY\nCERT"
        assert up.client_pem.stat().st_mode & 0o077 == 0
        assert str(up.client_pem).startswith("/proc/self/fd/") == in_memory


@pytest.mark.parametrize(
    ("context", "message"),
    [("nope", "contexts: no entry named 'nope'"), ("broken", "clusters: no entry named 'missing'")],
)
def test_bad_contexts_name_the_field(tmp_path: Path, context: str, message: str) -> None:
    with pytest.raises(KubeconfigError, match=message):
        read(write_kubeconfig(tmp_path, {}), context)


def test_cert_without_key_is_refused(tmp_path: Path) -> None:
    view = read(write_kubeconfig(tmp_path, {"client-certificate-data": "Q0VSVA=="}))
    with pytest.raises(KubeconfigError, match="go together"):
        upstream_from(view, PrivateFiles(tmp_path / "run").put)
