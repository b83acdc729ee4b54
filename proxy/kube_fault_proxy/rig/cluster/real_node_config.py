"""What the real node's daemons read: containerd's config, the CNI network, the kubelet's configuration and
its client certificate. Pure: paths in, text out (real_node.py writes them and starts the daemons)."""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODE_NAME = "kfp-real-node"
BRIDGE = "kfp-cni0"  # the CNI bridge on the host; deleted by `cluster down`
POD_SUBNET = "10.126.0.0/24"  # outside KWOK's 10.128.0.0/9 and podman's 10.88.0.0/16
# The node's address: the bridge's own, made before the kubelet starts (the kubelet refuses a loopback
# node IP, and the apiserver reaches the kubelet at the node's InternalIP). The CNI bridge plugin finds
# the bridge there with its gateway address and keeps it.
NODE_IP = "10.126.0.1"
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
RUNC = Path("/usr/sbin/runc")  # Debian's runc
K8S_NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images and containers


def data_dir(state_dir: Path) -> Path:
    """Where a cluster's real node keeps its data: a short path of its own under /var/lib, named by a hash of
    the state directory. The daemons' unix sockets live there (at most 104 bytes of path: under pytest's
    tmp_path containerd said "unix socket path too long (> 104)", and the kubelet's pod-resources socket would
    be 113 bytes), and so do the pods' volumes and logs."""
    return Path("/var/lib") / f"kfp-real-node-{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class Layout:
    """Where one real node keeps its configuration (root, in the cluster's state directory) and its data."""

    root: Path
    data: Path

    @property
    def containerd_root(self) -> Path:
        """containerd's persistent data (content store, overlay snapshots)."""
        return self.data / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        """containerd's run-time state (task bundles, the pods' network namespaces)."""
        return self.data / "containerd" / "state"

    @property
    def containerd_config(self) -> Path:
        """containerd's config.toml."""
        return self.root / "containerd" / "config.toml"

    @property
    def socket(self) -> Path:
        """containerd's gRPC socket (the kubelet's CRI endpoint); its ttrpc socket is beside it."""
        return self.data / "containerd" / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        """The directory containerd's CRI reads network configurations from."""
        return self.root / "cni" / "net.d"

    @property
    def ipam(self) -> Path:
        """host-local's allocations."""
        return self.data / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir (pods' volumes, its serving certificate, plugins)."""
        return self.data / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        """The KubeletConfiguration file."""
        return self.root / "kubelet.yaml"

    @property
    def kubeconfig(self) -> Path:
        """The kubelet's kubeconfig (its node client certificate)."""
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        """The kubelet's podLogsDir: the containers' stdout and stderr."""
        return self.data / "pod-logs"

    @property
    def images(self) -> Path:
        """The OCI archive imported into containerd."""
        return self.root / "images.tar"


def containerd_toml(layout: Layout, sandbox_image: str) -> str:
    """containerd 1.6's config (version 2): everything under the layout, runc by path, cgroupfs, our CNI dir.

    Plugins that need what this machine lacks (btrfs, zfs, devmapper, aufs) are disabled so they log
    nothing; `restrict_oom_score_adj` because root here lacks CAP_SYS_RESOURCE (a Guaranteed pod's -997
    would be refused); the sandbox image is the local one (no registry to pull the default from)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    disabled = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
    return "\n".join([
        "version = 2",
        f'root = "{layout.containerd_root}"',
        f'state = "{layout.containerd_state}"',
        f"disabled_plugins = {json.dumps(disabled)}",
        "",
        "[grpc]",
        f'  address = "{layout.socket}"',
        "",
        '[plugins."io.containerd.internal.v1.opt"]',
        f'  path = "{layout.data / "containerd" / "opt"}"',
        "",
        f"[{cri}]",
        f'  sandbox_image = "{sandbox_image}"',
        "  netns_mounts_under_state_dir = true",
        "  restrict_oom_score_adj = true",
        "  disable_apparmor = true",
        "  enable_selinux = false",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f'  BinaryName = "{RUNC}"',
        f"[{cri}.cni]",
        f'  bin_dir = "{CNI_BIN}"',
        f'  conf_dir = "{layout.cni_conf}"',
        "  max_conf_num = 1",
        "",
    ])


def cni_conflist(layout: Layout) -> dict[str, Any]:
    """A bridge with host-local addresses from POD_SUBNET; no masquerade (the pods talk to the host, not out)."""
    return {"cniVersion": "0.4.0", "name": "kfp-real-node", "plugins": [{
        "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "dataDir": str(layout.ipam)}}]}


def kubelet_configuration(layout: Layout, ca: Path, port: int, healthz_port: int,
                          runtime_endpoint: str) -> dict[str, Any]:
    """The KubeletConfiguration: cgroupfs on cgroup v1 (failCgroupV1: false), on the bridge only, x509 clients.

    Only clients holding a certificate of the cluster's CA reach it (the apiserver comes with the admin
    certificate for logs and exec); eviction thresholds low and image garbage collection off, because the
    local images cannot be pulled again once collected."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "containerRuntimeEndpoint": runtime_endpoint,
        "address": NODE_IP, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(layout.pod_logs), "volumePluginDir": str(layout.data / "volume-plugins"),
        "failSwapOn": False, "clusterDomain": "cluster.local",
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "nodeStatusReportFrequency": "10s", "nodeStatusUpdateFrequency": "5s",
        "serializeImagePulls": False, "maxPods": 20,
    }


def node_certificate(ca_cert: bytes, ca_key: bytes, node: str = NODE_NAME) -> tuple[bytes, bytes]:
    """A client certificate (PEM) and key for `system:node:<node>` in `system:nodes`, signed by the cluster's CA."""
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, rsa.RSAPrivateKey)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
            .sign(signer, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), pem_key
