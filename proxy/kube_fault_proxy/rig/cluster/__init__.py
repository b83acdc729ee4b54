"""A real local control plane: kube-apiserver, etcd and schedulers built from their Go modules."""
