"""The real node's images and configuration files, as containerd, CNI and the kubelet read them."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kube_fault_proxy.rig.cluster import host_sweep, node_images, pki, real_node, real_node_config

BUSYBOX = b"\x7fELF pretend static busybox"


def _members(archive: bytes) -> dict[str, bytes | str]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        out: dict[str, bytes | str] = {}
        for m in tar.getmembers():
            f = None if m.issym() else tar.extractfile(m)
            out[m.name] = f.read() if f else m.linkname
        return out


def test_the_archive_is_an_oci_layout_naming_both_images_over_one_layer() -> None:
    pause, workload = node_images.images(node_images.busybox_tag(BUSYBOX))
    files = _members(node_images.oci_archive(BUSYBOX, (pause, workload)))
    index = json.loads(files["index.json"])
    assert [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]] == [pause.name, workload.name]
    configs = []
    for entry in index["manifests"]:
        manifest_bytes = files[f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}"]
        assert isinstance(manifest_bytes, bytes)
        assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == entry["digest"]
        manifest = json.loads(manifest_bytes)
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
        configs.append(json.loads(files[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"]))
        assert configs[-1]["rootfs"]["diff_ids"] == [layer["digest"]]
    assert configs[0]["config"]["Entrypoint"] == list(node_images.SANDBOX_COMMAND)
    assert configs[1]["config"]["Cmd"] == ["/bin/sh"]
    assert files["oci-layout"] == b'{"imageLayoutVersion":"1.0.0"}'


def test_the_layer_holds_busybox_and_an_applet_link_each() -> None:
    files = _members(node_images.layer(BUSYBOX))
    assert files["bin/busybox"] == BUSYBOX
    assert files["bin/sh"] == "busybox" and files["bin/sleep"] == "busybox"
    assert node_images.layer(BUSYBOX) == node_images.layer(BUSYBOX)  # same input, same digest


def test_the_tag_names_the_busybox_build() -> None:
    assert node_images.busybox_tag(BUSYBOX) != node_images.busybox_tag(BUSYBOX + b"!")
    assert node_images.images("bb-1")[1].name == "kfp.local/busybox:bb-1"


def test_containerd_config_keeps_everything_under_the_state_dir(tmp_path: Path) -> None:
    layout = real_node_config.Layout(tmp_path, tmp_path / "data")
    conf = tomllib.loads(real_node_config.containerd_toml(layout, "kfp.local/pause:x"))
    assert conf["root"] == str(tmp_path / "data" / "containerd" / "root")
    assert conf["state"] == str(tmp_path / "data" / "containerd" / "state")
    assert conf["grpc"]["address"] == str(layout.socket)
    cri = conf["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "kfp.local/pause:x"
    assert cri["netns_mounts_under_state_dir"] is True and cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": False, "BinaryName": "/usr/sbin/runc"}
    assert cri["cni"]["conf_dir"] == str(layout.cni_conf)


def test_cni_bridge_allocates_from_the_pod_subnet_into_the_state_dir(tmp_path: Path) -> None:
    layout = real_node_config.Layout(tmp_path, tmp_path / "data")
    (plugin,) = real_node_config.cni_conflist(layout)["plugins"]
    assert plugin["bridge"] == real_node_config.BRIDGE and plugin["ipMasq"] is False
    assert plugin["ipam"]["dataDir"] == str(layout.ipam)
    assert plugin["ipam"]["ranges"] == [[{"subnet": real_node_config.POD_SUBNET}]]


def test_kubelet_runs_on_cgroup_v1_with_cgroupfs_and_admits_only_the_cluster_ca(tmp_path: Path) -> None:
    layout = real_node_config.Layout(tmp_path, tmp_path / "data")
    conf = real_node_config.kubelet_configuration(layout, tmp_path / "ca.crt", 10250, 10248, "unix:///x.sock")
    assert conf["failCgroupV1"] is False and conf["cgroupDriver"] == "cgroupfs"
    assert conf["authentication"]["anonymous"]["enabled"] is False
    assert conf["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert conf["address"] == real_node_config.NODE_IP and conf["readOnlyPort"] == 0  # on the bridge only
    assert conf["imageGCHighThresholdPercent"] == 100  # local images cannot be pulled again


def test_node_certificate_is_a_node_client_signed_by_the_cluster_ca(tmp_path: Path) -> None:
    pki.make(tmp_path)
    cert_pem, _ = real_node_config.node_certificate((tmp_path / "ca.crt").read_bytes(),
                                                    (tmp_path / "ca.key").read_bytes())
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:kfp-real-node"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_apiserver_reaches_the_kubelet_by_ip_with_the_admin_certificate(tmp_path: Path) -> None:
    flags = real_node.apiserver_flags(tmp_path)
    assert "--kubelet-preferred-address-types=InternalIP,Hostname" in flags
    assert f"--kubelet-client-certificate={tmp_path / 'admin.crt'}" in flags


def test_mount_points_under_the_state_dir_deepest_first() -> None:
    info = "\n".join([
        "36 25 0:32 / /srv/kfp/state/netns/cni-1 rw shared:5 - nsfs nsfs rw",
        "37 25 0:33 / /srv/kfp/state/a\\040b/rootfs rw shared:6 - overlay overlay rw",
        "38 25 0:34 / /srv/kfp/stateful rw shared:7 - tmpfs tmpfs rw",
        "39 25 0:35 / /srv/kfp/state/x rw shared:8 - tmpfs tmpfs rw"])
    assert host_sweep.mount_points_under(info, Path("/srv/kfp/state")) == [
        "/srv/kfp/state/a b/rootfs", "/srv/kfp/state/netns/cni-1", "/srv/kfp/state/x"]


def test_the_data_dir_is_short_enough_for_the_daemons_sockets(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60) / "state"
    data = real_node_config.data_dir(deep)
    layout = real_node_config.Layout(deep / "real-node", data)
    assert len(str(layout.socket) + ".ttrpc") <= 104
    assert len(str(layout.kubelet_root / "pod-resources" / "kubelet.sock")) <= 104
    assert data == real_node_config.data_dir(deep) != real_node_config.data_dir(tmp_path)  # one per state dir


def test_preflight_refuses_a_user_who_is_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_node.os, "geteuid", lambda: 1000)
    with pytest.raises(real_node.RealNodeError, match="needs root"):
        real_node.preflight()
