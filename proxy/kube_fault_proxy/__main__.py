"""python -m kube_fault_proxy → the kube-fault-proxy command."""

from kube_fault_proxy.cli.main import main

raise SystemExit(main())
