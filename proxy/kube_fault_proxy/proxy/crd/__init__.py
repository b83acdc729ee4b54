"""Profiles and activations as Kubernetes objects (group kube-fault-proxy.io): their CRDs, how an
object becomes a profile, and the source that applies them to a proxy from the apiserver."""

GROUP = "kube-fault-proxy.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
