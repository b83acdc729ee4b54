"""Each invariant's promise is upstream's own text: every fragment of its quote is found in the file it names,
in the module and at the version it names, read from Go's module cache as `cluster build` fetches it. A quote
that drifts from the source (a release that rewords a comment, a default release moved on) fails here.

No control plane: it needs only the go command and the module proxy, as the builds before it do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.invariants.catalogue import (
    CATALOGUE,
    CONDITION_INVARIANTS,
    CONTROLLER_INVARIANTS,
    FEATURE_INVARIANTS,
    STOP_INVARIANTS,
    Invariant,
    Promise,
)

MODULES = {"kubernetes": "k8s.io/kubernetes", "k8s.io/api": "k8s.io/api",
           "k8s.io/dynamic-resource-allocation": "k8s.io/dynamic-resource-allocation",
           "yunikorn-core": "github.com/apache/yunikorn-core", "yunikorn-k8shim": "github.com/apache/yunikorn-k8shim"}
FROM_SOURCE = [i for i in (*CATALOGUE, *CONTROLLER_INVARIANTS, *CONDITION_INVARIANTS, *FEATURE_INVARIANTS,
                            *STOP_INVARIANTS) if not i.promise.source.startswith("https://")]


def prose(go: str) -> str:
    """Go source as the words its comments say: comment markers gone, runs of white space one space."""
    return re.sub(r"\s+", " ", re.sub(r"^\s*//\s?", "", go, flags=re.M)).strip()


def source_file(p: Promise) -> Path:
    component, _, rest = p.source.partition(": ")
    name, version = component.split(" ")
    release = "v1." + version.removeprefix("v0.") if name.startswith("k8s.io/") else (
        version if name == "kubernetes" else build.versions.KUBERNETES)
    return build.module_source(MODULES[name], version, release) / rest.split(",")[0]


def missing(p: Promise, text: str) -> list[str]:
    return [f for f in p.fragments if prose(f) not in text]


def test_a_quote_not_in_its_source_is_caught() -> None:
    text = prose("// ObservedGeneration reflects the generation of the most recently\n// observed ReplicaSet.\n")
    assert missing(Promise("ObservedGeneration reflects the generation of the most recently observed ReplicaSet.",
                           "k8s.io/api v0.37.2: apps/v1/types.go, ReplicaSetStatus"), text) == []
    reworded = Promise("observedGeneration reflects the generation of the most recently observed ReplicaSet.",
                       "k8s.io/api v0.37.2: apps/v1/types.go, ReplicaSetStatus")
    assert missing(reworded, text) == [reworded.quote]


@pytest.mark.parametrize("invariant", FROM_SOURCE, ids=lambda i: i.name)
def test_every_promise_quote_is_in_the_source_it_names(invariant: Invariant) -> None:
    path = source_file(invariant.promise)
    assert path.is_file(), f"{invariant.name}: {invariant.promise.source} names {path}, which does not exist"
    assert missing(invariant.promise, prose(path.read_text())) == [], (invariant.name, invariant.promise.source)
