"""python -m proxy → the kube-fault-proxy command."""

from proxy.cli.main import main

raise SystemExit(main())
