"""The pinned versions of the real components, and why these ones."""

from __future__ import annotations

import re
from dataclasses import dataclass

# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (and kubelet): the release built when none is
# asked for: v1.37.2, the newest stable release the Go module proxy serves (v1.37.0 shipped 2026-08-26). v1.36.3,
# the default until 2026-12-06, is the newest v1.36 patch it serves (v1.36.6 and later are refused by it).
KUBERNETES = "v1.37.2"


@dataclass(frozen=True)
class Line:
    """What a Kubernetes minor release needs beside its own source: the etcd it runs on, and the Go toolchain."""

    etcd: str
    # GOTOOLCHAIN for every `go` command that builds it, when its go.mod asks for a newer Go than the
    # machines have (the go command then fetches that toolchain from the module proxy); None: the local go.
    toolchain: str | None = None


# One entry per minor release the rig builds. etcd is the version each release tests with: `etcd` in its
# build/dependencies.yaml (also hack/lib/etcd.sh's ETCD_VERSION), read from the module source.
LINES = {
    # v1.36 tests with etcd 3.6.8; the rig kept the newest v3.6 server the proxy serves, as it always has.
    "1.36": Line(etcd="v3.6.16"),
    # v1.37.2: build/dependencies.yaml etcd 3.7.0 (go.mod requires go.etcd.io/etcd/server/v3 v3.7.0); go 1.26.0.
    "1.37": Line(etcd="v3.7.0"),
    # v1.38.0-beta.0: build/dependencies.yaml etcd 3.7.1 (its go.mod's client is v3.7.3); go 1.27.0, which
    # the machines' Go 1.26 refuses ("requires go >= 1.27.0"): go1.27.3 is the approved toolchain.
    "1.38": Line(etcd="v3.7.1", toolchain="go1.27.3"),
}
# The releases the Go module proxy serves here (2026-12-06); later patches of a line above are accepted too.
RELEASES = ("v1.36.3", "v1.37.2", "v1.38.0-beta.0")

_VERSION = re.compile(r"v1\.(\d+)\.\d+(-(alpha|beta|rc)\.\d+)?")


def line(version: str) -> Line:
    """The minor line of a Kubernetes version like v1.37.2 or v1.38.0-beta.0; ValueError names what is wrong."""
    m = _VERSION.fullmatch(version)
    if m is None:
        raise ValueError(f"Kubernetes version {version!r} is not v1.MINOR.PATCH (optionally -alpha.N, -beta.N "
                         f"or -rc.N), e.g. {RELEASES[-1]}")
    minor = f"1.{m.group(1)}"
    if minor not in LINES:
        raise ValueError(f"Kubernetes version {version!r}: the rig builds v{', v'.join(LINES)} "
                         f"(served here: {', '.join(RELEASES)})")
    return LINES[minor]


ETCD = line(KUBERNETES).etcd  # the default release's etcd

# YuniKorn: v1.9.0 is the newest release and still has YUNIKORN-3355. It pins yunikorn-core
# v1.9.0-1 and yunikorn-scheduler-interface v1.9.0-0, which the module proxy refuses; their
# v1.9.0 tags are served and hold byte-identical source (same go.sum hash), so they are
# substituted. The shim's own v1.9.0 is missing from the checksum database, hence GONOSUMDB.
YUNIKORN = "v1.9.0"
YUNIKORN_REPLACES = {
    "github.com/apache/yunikorn-core": "v1.9.0",
    "github.com/apache/yunikorn-scheduler-interface": "v1.9.0",
}
YUNIKORN_NOSUMDB = "github.com/apache/yunikorn-k8shim"
# What the v1.9.0 shim pins for them: a source tree that pins the same gets the same substitution.
YUNIKORN_REFUSED_PINS = {
    "github.com/apache/yunikorn-core": "v1.9.0-1",
    "github.com/apache/yunikorn-scheduler-interface": "v1.9.0-0",
}
# KWOK: fake Nodes and the lifecycle of pods on them, as in the seed's reproduction (kind + KWOK).
# v0.7.0 is the newest release the module proxy serves; its go.mod has no replace directives.
KWOK = "v0.7.0"
