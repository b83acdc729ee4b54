"""The kube-fault-proxy command line."""
