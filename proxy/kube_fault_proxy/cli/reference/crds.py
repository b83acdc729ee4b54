"""The FaultProfile and FaultActivation custom resources' reference, from their CRDs and the models behind them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kube_fault_proxy.cli.reference import models
from kube_fault_proxy.cli.reference.markdown import code, page, table, text
from kube_fault_proxy.proxy.crd import API_VERSION, objects
from kube_fault_proxy.proxy.crd.definitions import activation_crd, profile_crd
from kube_fault_proxy.proxy.profiles.profile import NAME_PATTERN

STATUS_MODELS: list[type[BaseModel]] = [objects.ActivationStatus, objects.ProxyStatus, objects.RuleCounts,
                                        objects.Condition]
ACTIVATION_MODELS: list[type[BaseModel]] = [objects.ActivationSpec, *STATUS_MODELS]


def _names(crd: dict[str, Any]) -> str:
    spec = crd["spec"]
    names = spec["names"]
    [version] = spec["versions"]
    columns = ", ".join(f"{c['name']} ({code(c['jsonPath'])})" for c in version["additionalPrinterColumns"])
    subresources = ", ".join(code(s) for s in version.get("subresources", {})) or "none"
    rows = [("CRD", code(crd["metadata"]["name"])), ("apiVersion", code(API_VERSION)),
            ("kind", code(names["kind"])), ("plural", code(names["plural"])), ("scope", spec["scope"]),
            ("category", ", ".join(code(c) for c in names["categories"])), ("subresources", subresources),
            ("kubectl get columns", columns)]
    return table(("property", "value"), rows)


def _metadata() -> str:
    return (f"`metadata.name` must match {code(NAME_PATTERN)}, at most 63 characters. A profile file's "
            f"`metadata.description` and `metadata.incident` go in the annotations {code(objects.DESCRIPTION)} and "
            f"{code(objects.INCIDENT)}.\n")


def undescribed() -> list[str]:
    """Every field of a FaultActivation's spec or status without a description."""
    return [f"{m.__name__}.{key}" for m in ACTIVATION_MODELS
            for key, info, _ in models.fields(m) if not info.description]


def crds_page() -> str:
    """docs/reference/crds.md."""
    links = {m.__name__: f"#{m.__name__.lower()}" for m in ACTIVATION_MODELS}
    profile, activation = profile_crd(), activation_crd()
    sections = [
        f"## FaultProfile\n\n{text(profile['spec']['versions'][0]['schema']['openAPIV3Schema']['description'])}\n\n"
        f"{_names(profile)}\n{_metadata()}\n`spec` is a profile file's `spec`, field for field: "
        "[Spec](profile.md#spec), [Rule](profile.md#rule) and the [fault kinds](fault-kinds.md). The apiserver "
        "checks the CRD's schema; the proxy then loads the object with the same loader as a file, so it is "
        "refused for the same reasons (the FaultActivation's condition says why).\n",
        f"## FaultActivation\n\n"
        f"{text(activation['spec']['versions'][0]['schema']['openAPIV3Schema']['description'])}\n\n"
        f"{_names(activation)}\nEvery proxy carries the label {code(objects.PROXY_LABEL)} with its own name "
        "(`serve --proxy-name`), so a `proxySelector` can pick one proxy.\n",
        models.section(objects.ActivationSpec, links, "spec (ActivationSpec)", level=3),
    ]
    sections += [models.section(m, links, level=3) for m in STATUS_MODELS]
    return page("Custom resources", "With `serve --profiles-from-cluster`, the proxy takes profiles and "
                "activations from Kubernetes objects. `kube-fault-proxy crds` prints both "
                "CustomResourceDefinitions (`deploy/crds.yaml` holds them).", sections)
