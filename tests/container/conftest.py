"""The container engine with the image built, and a local control plane for the containerised proxy."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.container.engine import Engine, built_image
from tests.support.cluster import start_cluster, stop_cluster


@pytest.fixture(scope="package")
def engine() -> Engine:
    """podman set up by the project's script, the image built from the Dockerfile on the debootstrap base."""
    built = built_image()
    print(f"image built {built.where} in {built.seconds:.1f}s", file=sys.stderr)
    return built.engine


@pytest.fixture(scope="package")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """5 KWOK nodes and no scheduler: the containerised proxy (and YuniKorn behind it) are the only clients."""
    c = start_cluster(tmp_path_factory.mktemp("container-cluster"), "--nodes", "5")
    yield c
    stop_cluster(c)

