"""The container engine with the image built, and a local control plane for the containerised proxy."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from kube_fault_proxy.rig.cluster.control_plane import Cluster

from tests.container.engine import Engine, build_image, set_up
from tests.support.cluster import start_cluster, stop_cluster


@pytest.fixture(scope="package")
def engine() -> Engine:
    """podman set up by the project's script, the image built from the Dockerfile on the debootstrap base."""
    e = set_up()
    seconds = build_image(e)
    print(f"image built in {seconds:.1f}s", file=sys.stderr)
    return e


@pytest.fixture(scope="package")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """5 KWOK nodes and no scheduler: the containerised proxy (and YuniKorn behind it) are the only clients."""
    c = start_cluster(tmp_path_factory.mktemp("container-cluster"), "--nodes", "5")
    yield c
    stop_cluster(c)

