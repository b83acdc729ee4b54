"""etcd's lifecycle (etcd.py): the client URL it names in its own log."""

from __future__ import annotations

from pathlib import Path

from kube_fault_proxy.rig.cluster.etcd import client_url


def test_etcd_names_the_port_it_took_in_its_log(tmp_path: Path) -> None:
    log = tmp_path / "etcd.log"
    log.write_text('{"level":"info","msg":"serving peer traffic","address":"127.0.0.1:46713"}\n')
    assert client_url(log) is None
    log.write_text(log.read_text() + '{"level":"info","caller":"embed/serve.go:222","msg":"serving client traffic '
                   'insecurely; this is strongly discouraged!","traffic":"grpc+http","address":"127.0.0.1:37365"}\n')
    assert client_url(log) == "http://127.0.0.1:37365"
