"""kube-fault-proxy: a Kubernetes-aware, fault-injecting reverse proxy for scheduler testing."""

__version__ = "0.1.0"
