"""The pinned versions of the real components, and why these ones."""

from __future__ import annotations

# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl: the newest v1.36 patch the Go module proxy serves
# (v1.36.6 and later are refused by it).
KUBERNETES = "v1.36.3"
# etcd: the newest v3.6 server module the proxy serves.
ETCD = "v3.6.16"
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
